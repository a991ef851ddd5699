"""Enqueue, then drain: N one-off no-op jobs enqueued from application code, one transaction
each (as N requests would), then W replicas x C concurrency started to run them all; beside
procrastinate's ``defer`` of N no-op jobs and its workers draining them, on the same server
in the same run.

Figures: the seconds to enqueue N, and the drain, from the moment the workers are spawned to
the last completion (their start-up included, for both).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from ..postgres import ROOT, Database
from .peer import python, start_workers, stop_workers, wait_succeeded
from .thundering import RESET, completed, spawn_replica, stop_replicas, wait_for

DEFER = """
import json, sys, time
from bench.perf.peer_app import app, noop
count = int(sys.argv[1])
with app.open():
    started = time.monotonic()
    for n in range(count):
        noop.defer(timestamp=n)
    print(json.dumps({"seconds": time.monotonic() - started}))
"""


def ours(db: Database, *, jobs: int, replicas: int, concurrency: int, log_dir: Path) -> dict:
    from django_jobs import enqueue

    db.execute(RESET)
    started = time.monotonic()
    for n in range(jobs):
        enqueue("perf.noop", args={"n": n})  # autocommit: one transaction each
    enqueue_s = time.monotonic() - started
    ((spawned,),) = db.rows("SELECT clock_timestamp()")
    processes = [spawn_replica(db, f"q{n}", concurrency, log_dir) for n in range(1, replicas + 1)]
    try:
        wait_for(lambda: completed(db) >= jobs, timeout=1800, what=f"{jobs} jobs", every=0.2)
    finally:
        stop_replicas(processes)
    ((last,),) = db.rows("SELECT max(finished_at) FROM django_jobs_occurrence")
    return _row(
        "django_jobs: enqueue(), then runworker",
        jobs,
        replicas,
        concurrency,
        enqueue_s,
        (last - spawned).total_seconds(),
    )


def theirs(db: Database, *, jobs: int, replicas: int, concurrency: int, log_dir: Path) -> dict:
    binary = python()
    db = Database.create(db.url, name="django_jobs_perf_peer")
    env = {**os.environ, "DATABASE_URL": db.url, "PEER_SCHEDULES": "0", "PYTHONPATH": str(ROOT)}
    cli = [str(binary), "-m", "procrastinate", "--app=bench.perf.peer_app.app"]
    subprocess.run([*cli, "schema", "--apply"], env=env, check=True, capture_output=True)
    deferred = subprocess.run(
        [str(binary), "-c", DEFER, str(jobs)],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    enqueue_s = json.loads(deferred.stdout.strip().splitlines()[-1])["seconds"]
    ((spawned,),) = db.rows("SELECT clock_timestamp()")
    processes = start_workers(cli, env, replicas, concurrency, log_dir, name="procrastinate-drain")
    try:
        wait_succeeded(db, jobs)
    finally:
        stop_workers(processes)
    ((last,),) = db.rows("SELECT max(at) FROM procrastinate_events WHERE type = 'succeeded'")
    return _row(
        "procrastinate: defer(), then workers",
        jobs,
        replicas,
        concurrency,
        enqueue_s,
        (last - spawned).total_seconds(),
    )


def _row(
    scenario: str, jobs: int, replicas: int, concurrency: int, enqueue_s: float, drain_s: float
) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "jobs": jobs,
        "replicas": replicas,
        "concurrency": concurrency,
        "enqueue_s": enqueue_s,
        "enqueued_per_second": jobs / enqueue_s,
        "drain_s": drain_s,
        "drained_per_second": jobs / drain_s,
    }


def run(
    db: Database, *, jobs: int, replicas: int, concurrency: int, log_dir: Path
) -> list[dict[str, Any]]:
    """Both sides, and a row of our figures over theirs (below 1: we are faster)."""
    mine = ours(db, jobs=jobs, replicas=replicas, concurrency=concurrency, log_dir=log_dir)
    peer = theirs(db, jobs=jobs, replicas=replicas, concurrency=concurrency, log_dir=log_dir)
    ratio = {
        "scenario": "django_jobs / procrastinate",
        "jobs": jobs,
        "enqueue_time_ratio": mine["enqueue_s"] / peer["enqueue_s"],
        "drain_time_ratio": mine["drain_s"] / peer["drain_s"],
        "at": datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    return [mine, peer, ratio]
