"""Thundering second: S schedules due at the same instant, W replicas x C concurrency."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..postgres import ROOT, Database
from .measure import Counters, peak_rss_mb

RESET = (
    "TRUNCATE django_jobs_step, django_jobs_attempt, django_jobs_occurrence, django_jobs_limit,"
    " django_jobs_runbook, django_jobs_schedule, django_jobs_replica, perf_write CASCADE"
)


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def wait_for(condition: Any, *, timeout: float, what: str, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def spawn_replica(
    db: Database,
    name: str,
    concurrency: int,
    log_dir: Path,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``runworker`` as replica ``perf-<name>`` (log: ``<name>.log``), with ``env`` added
    to its environment, without waiting for it."""
    log_dir.mkdir(parents=True, exist_ok=True)
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.perf.settings",
        "DATABASE_URL": db.url,
        "PERF_ROLE": name,
        **(env or {}),
    }
    command = [sys.executable, "-W", "ignore", str(ROOT / "manage.py"), "runworker"]
    with (log_dir / f"{name}.log").open("w") as log:
        return subprocess.Popen(
            [*command, "--replica-id", f"perf-{name}", "--concurrency", str(concurrency)],
            cwd=ROOT,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def start_replicas(
    db: Database, count: int, concurrency: int, log_dir: Path
) -> list[subprocess.Popen[bytes]]:
    """``count`` replicas ``perf-r1``..., once every one of them reports itself running."""
    processes = [spawn_replica(db, f"r{n}", concurrency, log_dir) for n in range(1, count + 1)]
    wait_for(
        lambda: (
            db.rows("SELECT count(*) FROM django_jobs_replica WHERE state = 'running'")[0][0]
            >= count
        ),
        timeout=120,
        what=f"{count} replicas to start",
    )
    return processes


def stop_replicas(processes: list[subprocess.Popen[bytes]], timeout: float = 60) -> float:
    """SIGTERM the replicas, reap them, and return the CPU seconds they used in all."""
    for process in processes:
        process.send_signal(signal.SIGTERM)
    cpu, deadline = 0.0, time.monotonic() + timeout
    for process in processes:
        while True:
            pid, _, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                cpu += usage.ru_utime + usage.ru_stime
                process.returncode = 0
                break
            if time.monotonic() > deadline:
                process.kill()
                deadline += 10
            time.sleep(0.05)
    return cpu


def add_schedules(
    count: int,
    *,
    job: str,
    due: datetime,
    interval: timedelta = timedelta(days=1),
    prefix: str = "perf.s",
) -> None:
    """``count`` schedules whose next instant is ``due`` (every ``interval``, anchored there)."""
    from django_jobs.models import Schedule

    # Created just before ``due``, so that ``due`` is its first instant.
    created = due - min(timedelta(seconds=1), interval / 2)
    Schedule.objects.bulk_create(
        [
            Schedule(
                key=f"{prefix}{n:07d}",
                job=job,
                timing_kind="interval",
                interval=interval,
                anchor=due,
                max_delay=timedelta(hours=1),
                overlap="allow",
                misfire="skip",
                operating_owner="benchmarks",
                record_owner="perf@example.com",
                status="active",
                origin="runtime",
                created_at=created,
                updated_at=created,
                next_due_at=due,
            )
            for n in range(count)
        ],
        batch_size=5000,
    )


def lateness(db: Database) -> list[float]:
    """Start lateness of every first attempt, in seconds."""
    return [
        float(s)
        for (s,) in db.rows(
            "SELECT extract(epoch FROM a.started_at - o.scheduled_at)"
            " FROM django_jobs_attempt a JOIN django_jobs_occurrence o ON o.id = a.occurrence_id"
            " WHERE a.number = 1"
        )
    ]


def run(
    db: Database, *, schedules: int, replicas: int, concurrency: int, job: str, log_dir: Path
) -> dict[str, Any]:
    db.execute(RESET)
    processes = start_replicas(db, replicas, concurrency, log_dir)
    pids = [p.pid for p in processes]
    try:
        due = (datetime.now(UTC) + timedelta(seconds=3 + schedules / 5000)).replace(microsecond=0)
        add_schedules(schedules, job=job, due=due)
        wait_for(lambda: datetime.now(UTC) >= due - timedelta(seconds=0.3), timeout=60, what="T")
        before = Counters.read(db, pids)
        wait_for(
            lambda: completed(db) >= schedules,
            timeout=1800,
            what=f"{schedules} completions",
            every=0.2,
        )
        rss = max(peak_rss_mb(pid) for pid in pids)
        # CPU now, while PostgreSQL's backends of the replicas still exist.
        cpu = Counters.read(db, pids) - before
    finally:
        stop_replicas(processes)
    # Commits and WAL once the replicas have exited: a backend flushes its statistics then.
    spent = Counters.read(db, []) - before
    row, _ = our_burst(
        db,
        f"thundering second ({job.split('.')[1]})",
        shape=(schedules, replicas, concurrency),
        due=due,
        spent=spent,
        cpu=cpu,
        rss=rss,
    )
    return row


def completed(db: Database) -> int:
    """How many occurrences have completed."""
    return int(
        db.rows("SELECT count(*) FROM django_jobs_occurrence WHERE state = 'completed'")[0][0]
    )


def our_burst(
    db: Database,
    scenario: str,
    *,
    shape: tuple[int, int, int],
    due: datetime,
    spent: Counters,
    cpu: Counters,
    rss: float,
) -> tuple[dict[str, Any], list[float]]:
    """The figures of a burst of ours that came due at ``due`` (``shape``: S, W, C), read from
    its occurrences once it is over, and each start's lateness."""
    schedules, replicas, concurrency = shape
    ((last,),) = db.rows("SELECT max(finished_at) FROM django_jobs_occurrence")
    late = lateness(db)
    row = burst_figures(
        scenario,
        schedules=schedules,
        replicas=replicas,
        concurrency=concurrency,
        makespan=(last - due).total_seconds(),
        late=late,
        spent=spent,
        cpu=cpu,
        rss=rss,
    )
    return row, late


def burst_figures(
    scenario: str,
    *,
    schedules: int,
    replicas: int,
    concurrency: int,
    makespan: float,
    late: list[float],
    spent: Counters,
    cpu: Counters,
    rss: float,
) -> dict[str, Any]:
    """The row of a thundering-second run, ours or a peer's: the same figures for both."""
    return {
        "scenario": scenario,
        "schedules": schedules,
        "replicas": replicas,
        "concurrency": concurrency,
        "makespan_s": makespan,
        "per_second": schedules / makespan,
        "lateness_p50_s": percentile(late, 50),
        "lateness_p95_s": percentile(late, 95),
        "lateness_p99_s": percentile(late, 99),
        "commits_per_occurrence": spent.commits / schedules,
        "wal_bytes_per_occurrence": spent.wal_bytes / schedules,
        "wal_records_per_occurrence": spent.wal_records / schedules,
        "wal_fpi_per_occurrence": spent.wal_fpi / schedules,
        # Row versions (inserts, updates, deletes) in the scheduler's tables; HOT updates are
        # among them, reported apart too. The JSON has them table by table.
        "row_versions_per_occurrence": spent.row_versions / schedules,
        "hot_updates_per_occurrence": spent.hot_updates / schedules,
        "row_versions_by_table": {name: asdict(writes) for name, writes in spent.tables.items()},
        "postgres_cpu_s": cpu.postgres_cpu,
        "workers_cpu_s": cpu.workers_cpu,
        "peak_rss_mb": rss,
    }
