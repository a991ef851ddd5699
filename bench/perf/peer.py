"""Side by side: procrastinate (the nearest Python peer) on the same server, in the same run,
with the same S due at the same second, W worker processes x C concurrency, a no-op task."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..postgres import ROOT, Database
from .measure import Counters, peak_rss_mb
from .thundering import burst_figures, wait_for

VENV = ROOT / "bench" / ".peer-venv"
RELEASE = "procrastinate==3.10.0"  # the latest release when this benchmark was written


def python() -> Path:
    """The benchmark's own virtualenv with procrastinate, made on first use."""
    binary = VENV / "bin" / "python"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run(
            [str(binary), "-m", "pip", "install", "-q", RELEASE], check=True, timeout=600
        )
    return binary


def _env(db: Database, schedules: int, due: datetime) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": db.url,
        "PEER_SCHEDULES": str(schedules),
        "PEER_DUE": str(due.timestamp()),
        "PYTHONPATH": str(ROOT),
    }


def start_workers(
    cli: list[str],
    env: dict[str, str],
    replicas: int,
    concurrency: int,
    log_dir: Path,
    *,
    name: str,
) -> list[subprocess.Popen[bytes]]:
    """``replicas`` procrastinate workers of ``concurrency`` each (logs ``<name>-<n>.log``)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    processes = []
    for n in range(1, replicas + 1):
        with (log_dir / f"{name}-{n}.log").open("w") as log:
            processes.append(
                subprocess.Popen(
                    [*cli, "worker", "--concurrency", str(concurrency)],
                    env=env,
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    return processes


def wait_succeeded(db: Database, count: int) -> None:
    """Until ``count`` procrastinate jobs have succeeded (at most 30 minutes)."""
    wait_for(
        lambda: (
            db.rows("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")[0][0]
            >= count
        ),
        timeout=1800,
        what=f"{count} procrastinate jobs to succeed",
        every=0.2,
    )


def stop_workers(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGINT the workers (procrastinate's graceful stop) and reap them."""
    for process in processes:
        process.send_signal(signal.SIGINT)
    for process in processes:
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def run(
    db: Database, *, schedules: int, replicas: int, concurrency: int, log_dir: Path
) -> dict[str, Any]:
    binary = python()
    # A database of its own on the same server, fresh for every run.
    db = Database.create(db.url, name="django_jobs_perf_peer")
    cli = [str(binary), "-m", "procrastinate", "--app=bench.perf.peer_app.app"]
    due = (datetime.now(UTC) + timedelta(seconds=8 + schedules / 2000)).replace(microsecond=0)
    env = _env(db, schedules, due)
    subprocess.run([*cli, "schema", "--apply"], env=env, check=True, capture_output=True)
    processes = start_workers(cli, env, replicas, concurrency, log_dir, name="procrastinate")
    pids = [p.pid for p in processes]
    try:
        wait_for(
            lambda: datetime.now(UTC) >= due - timedelta(seconds=0.3),
            timeout=120,
            what="the due second",
        )
        before = Counters.read(db, pids)
        wait_succeeded(db, schedules)
        rss = max(peak_rss_mb(pid) for pid in pids)
        cpu = Counters.read(db, pids) - before
    finally:
        stop_workers(processes)
    spent = Counters.read(db, []) - before
    ((last,),) = db.rows("SELECT max(at) FROM procrastinate_events WHERE type = 'succeeded'")
    late = [
        float(s)
        for (s,) in db.rows(
            "SELECT extract(epoch FROM e.at) - %s FROM procrastinate_events e"
            " WHERE e.type = 'started'",
            [due.timestamp()],
        )
    ]
    return burst_figures(
        "procrastinate, thundering second (noop)",
        schedules=schedules,
        replicas=replicas,
        concurrency=concurrency,
        makespan=(last - due).total_seconds(),
        late=late,
        spent=spent,
        cpu=cpu,
        rss=rss,
    )
