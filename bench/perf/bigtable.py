"""Big table: the occurrence table grown to N finished rows (generated directly), then the
claim's latency with a handful of due rows, and a retention purge in batches."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from ..postgres import Database
from .thundering import RESET, add_schedules, percentile

FILL = """
    INSERT INTO django_jobs_occurrence (
        id, schedule_id, tenant, scheduled_at, state, skip_reason, trigger, due_at,
        lease_owner, fencing_token, attempts, failures, started_at, finished_at,
        last_error_type, last_error_message)
    SELECT gen_random_uuid(), %(schedule)s, '', %(start)s::timestamptz + n * interval '1 second',
           'completed', '', 'schedule', %(start)s::timestamptz + n * interval '1 second',
           '', 1, 1, 0, %(start)s::timestamptz + n * interval '1 second',
           %(start)s::timestamptz + n * interval '1 second', '', ''
    FROM generate_series(%(low)s, %(high)s - 1) AS n
"""


def _claim_latency(due: int, samples: int) -> list[float]:
    """Seconds per claim of ``due`` due rows, rolled back each time so every sample sees the
    same table."""
    from django.db import transaction

    from django_jobs import store

    times = []
    for _ in range(samples):
        with transaction.atomic():
            started = time.perf_counter()
            store.claim(
                owner="bench", now=datetime.now(UTC), lease_for=timedelta(seconds=30), limit=due
            )
            times.append(time.perf_counter() - started)
            transaction.set_rollback(True)
    return times


def run(
    db: Database, *, rows: int, due: int = 50, samples: int = 50, max_batches: int = 20
) -> dict[str, Any]:
    from django_jobs import store
    from django_jobs.models import Limit, Schedule

    db.execute(RESET)
    now = datetime.now(UTC).replace(microsecond=0)
    add_schedules(due, job="perf.noop", due=now - timedelta(seconds=5), prefix="perf.due")
    history = Schedule.objects.get(key="perf.due0000000")
    start = now - timedelta(seconds=rows + 3600 * 24 * 400)
    filled_at = time.perf_counter()
    for low in range(0, rows, 1_000_000):
        db.execute(
            FILL,
            {
                "schedule": history.pk,
                "start": start,
                "low": low,
                "high": min(rows, low + 1_000_000),
            },
        )
    db.execute("VACUUM ANALYZE django_jobs_occurrence")
    fill_seconds = time.perf_counter() - filled_at
    from django_jobs.worker.planning import plan_due

    plan_due(now=now)  # the due schedules' occurrences
    claims = _claim_latency(due, samples)
    # Retention: keep the newest day; everything older goes, batch by batch (the first
    # ``max_batches`` of them are timed: each batch is one short statement).
    Limit.objects.update_or_create(schedule=history, defaults={"keep_for": timedelta(days=1)})
    batch = 10_000
    batches: list[float] = []
    started = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        removed = store.purge_batch(history.pk, now=now, batch_size=batch)
        batches.append(time.perf_counter() - t0)
        if removed < batch or len(batches) >= max_batches:
            break
    return {
        "scenario": "big table",
        "rows": rows,
        "fill_s": fill_seconds,
        "claim_p50_ms": (percentile(claims, 50) or 0) * 1000,
        "claim_p99_ms": (percentile(claims, 99) or 0) * 1000,
        "purge_batches": len(batches),
        "purge_batch_rows": batch,
        "purge_batch_max_ms": max(batches) * 1000,
        "purge_rows_per_s": sum(1 for _ in batches) * batch / (time.perf_counter() - started),
    }
