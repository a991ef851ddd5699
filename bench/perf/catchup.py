"""Catching up after a long gap: per-minute crons disabled for a year and enabled together (the
user's path: an operator's enable after a tenant's year off). Each plan pass is bounded, so
what counts is the longest pass (the replica neither heartbeats nor claims during one) and the
total, against the same run's baseline: listing each year's instants one by one, which is what
one pass cost before planning was bounded."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from ..postgres import Database
from .thundering import RESET


def run(db: Database, *, schedules: int) -> dict[str, Any]:
    from django_jobs.models import Schedule
    from django_jobs.scheduling.timings import cron
    from django_jobs.worker.planning import PASS_BUDGET_SECONDS, plan_due

    db.execute(RESET)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    year_ago = now - timedelta(days=365)
    Schedule.objects.bulk_create(
        [
            Schedule(
                key=f"perf.year{n:05d}",
                job="perf.noop",
                timing_kind="cron",
                cron="* * * * *",
                max_delay=timedelta(minutes=5),
                overlap="allow",
                misfire="skip",
                operating_owner="benchmarks",
                record_owner="perf@example.com",
                status="active",
                origin="runtime",
                created_at=year_ago,
                updated_at=year_ago,
                last_scheduled_at=year_ago,
                next_due_at=now,
            )
            for n in range(schedules)
        ]
    )
    passes, longest = 0, 0.0
    started = time.perf_counter()
    while True:
        began = time.perf_counter()
        result = plan_due(now=now, budget_seconds=PASS_BUDGET_SECONDS)
        longest = max(longest, time.perf_counter() - began)
        if not result.schedules:
            break
        passes += 1
    total = time.perf_counter() - started
    timing = cron("* * * * *").validate()
    began = time.perf_counter()
    listed, start = 0, year_ago + timedelta(microseconds=1)
    while start < now:  # a month at a time: the listing's own bound on one window
        stop = min(now, start + timedelta(days=30))
        listed += len(timing.between(start, stop))
        start = stop
    one_year_listed = time.perf_counter() - began
    return {
        "scenario": "catch-up after a year",
        "schedules": schedules,
        "passes": passes,
        "longest_pass_s": longest,
        "total_s": total,
        "listing_one_year_s": one_year_listed,
        "listing_all_s": one_year_listed * schedules,
        "speedup": one_year_listed * schedules / total,
        "instants_per_schedule": listed,
    }
