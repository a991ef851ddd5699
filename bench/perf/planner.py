"""Planner scale: N enabled schedules of which 1% are due. The cost of planning what is due
must follow the due ones, not the ones that exist."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from ..postgres import Database
from .thundering import RESET, add_schedules


def run(db: Database, *, schedules: int, due_share: float = 0.01) -> dict[str, Any]:
    from django_jobs.worker.planning import plan_due

    db.execute(RESET)
    now = datetime.now(UTC).replace(microsecond=0)
    due = int(schedules * due_share)
    add_schedules(due, job="perf.noop", due=now - timedelta(seconds=1), prefix="perf.due")
    add_schedules(
        schedules - due, job="perf.noop", due=now + timedelta(days=1), prefix="perf.later"
    )
    db.execute("ANALYZE django_jobs_schedule")
    passes, planned = 0, 0
    started = time.perf_counter()
    while (result := plan_due(now=now)).schedules:
        passes += 1
        planned += result.planned
    spent = time.perf_counter() - started
    return {
        "scenario": "planner scale",
        "schedules": schedules,
        "due": due,
        "planned": planned,
        "passes": passes,
        "seconds": spent,
        "ms_per_due_schedule": spent * 1000 / max(1, due),
    }
