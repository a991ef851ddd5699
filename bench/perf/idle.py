"""Idle lateness: one schedule every second on an otherwise idle worker, and sustained load:
S schedules every second. Start lateness over the run, first half against second half."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..postgres import Database
from .measure import rss_mb
from .thundering import RESET, add_schedules, percentile, start_replicas, stop_replicas


def run(
    db: Database,
    *,
    schedules: int,
    seconds: int,
    replicas: int,
    concurrency: int,
    log_dir: Path,
) -> dict[str, Any]:
    db.execute(RESET)
    processes = start_replicas(db, replicas, concurrency, log_dir)
    try:
        first = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
        add_schedules(schedules, job="perf.noop", due=first, interval=timedelta(seconds=1))
        end = first + timedelta(seconds=seconds)
        # The run lasts as long as it lasts: the harness waits it out, reading the replicas'
        # resident memory at every tenth of it (the first reading after warm-up).
        memory: list[float] = []
        for tenth in range(1, 11):
            at = first + timedelta(seconds=seconds * tenth / 10)
            time.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()))
            memory.append(max(rss_mb(p.pid) for p in processes))
        time.sleep(2)
    finally:
        stop_replicas(processes)
    rows = db.rows(
        "SELECT o.scheduled_at, extract(epoch FROM a.started_at - o.scheduled_at)"
        " FROM django_jobs_attempt a JOIN django_jobs_occurrence o ON o.id = a.occurrence_id"
        " WHERE a.number = 1 AND o.scheduled_at < %s",
        [end],
    )
    half = first + timedelta(seconds=seconds / 2)
    late = [float(s) for _, s in rows]
    early_half = [float(s) for at, s in rows if at < half]
    late_half = [float(s) for at, s in rows if at >= half]
    return {
        "scenario": "idle lateness" if schedules == 1 else "sustained load",
        "schedules": schedules,
        "replicas": replicas,
        "concurrency": concurrency,
        "seconds": seconds,
        "per_second": len(rows) / seconds,
        "expected": schedules * seconds,
        "started": len(rows),
        "lateness_p50_s": percentile(late, 50),
        "lateness_p99_s": percentile(late, 99),
        "first_half_p99_s": percentile(early_half, 99),
        "second_half_p99_s": percentile(late_half, 99),
        # Resident memory of the largest replica at 10% of the run and at its end: flat means
        # nothing grows per occurrence.
        "rss_at_10pct_mb": memory[0],
        "rss_at_end_mb": memory[-1],
        "rss_max_mb": max(memory),
    }
