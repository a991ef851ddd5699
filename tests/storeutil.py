"""Small helpers shared by the store tests."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction

from django_jobs import store
from django_jobs.clock import Clock
from django_jobs.models import Limit, Schedule
from django_jobs.store import Lease, PlannedOccurrence, claims

LEASE = timedelta(seconds=30)


def planned(schedule: Schedule, *instants: datetime) -> list[PlannedOccurrence]:
    return [
        PlannedOccurrence(
            schedule_id=schedule.pk,
            tenant=schedule.tenant,
            schedule_key=schedule.key,
            scheduled_at=at,
        )
        for at in instants
    ]


def plan(schedule: Schedule, *instants: datetime, now: datetime) -> list:
    return store.plan(planned(schedule, *instants), now=now)


def explain_claim(now: datetime, *, limit: int, queue: str | None = None) -> str:
    """The plan (``EXPLAIN``) of a claim by owner ``r1`` at ``now`` as the store runs it: of
    ``queue`` (its own statement), or of every queue; the due-index walk set as the store sets
    it for the claim's transaction."""
    params: dict[str, Any] = dict(now=now, expires=now + LEASE, owner="r1", limit=limit)
    params |= dict(start_now=None, tenant=None, excluded=[], queue=queue, other_queues=[])
    queries = claims.QUERIES if queue is None else claims.QUEUE_QUERIES
    with transaction.atomic(), connection.cursor() as cursor:
        claims._walk_the_due_index()
        cursor.execute("EXPLAIN (FORMAT TEXT) " + queries["claim"], params)
        return "\n".join(row[0] for row in cursor.fetchall())


def claim(
    owner: str, now: datetime, limit: int = 10, *, lease_for: timedelta = LEASE, **kwargs
) -> list[Lease]:
    """Take up to ``limit`` due occurrences for ``owner``; their leases, oldest first (see
    ``store.claim_runs``, which also returns each occurrence's schedule)."""
    runs = store.claim_runs(owner=owner, now=now, lease_for=lease_for, limit=limit, **kwargs)
    return [lease for lease, _ in runs]


def missed_unstarted(schedule: Schedule, *, now: datetime) -> list[datetime]:
    """Scheduled instants of ``schedule`` that never started and are now later than its
    ``max_delay``: what the plan pass hands the misfire policy (``store.planning_context``)."""
    return store.planning_context([schedule], now=now).missed.get(schedule.pk, [])


def purge(*, now: datetime, batch_size: int) -> int:
    """Delete every schedule's finished occurrences beyond its retention Limit, a batch at a
    time (``store.purge_batch``), as automatic retention does; the number deleted."""
    deleted = 0
    for schedule_id in Limit.objects.order_by("schedule_id").values_list("schedule_id", flat=True):
        while (count := store.purge_batch(schedule_id, now=now, batch_size=batch_size)) > 0:
            deleted += count
            if count < batch_size:
                break
    return deleted


def claim_one_at_a_time(clock: Clock, passes: int) -> None:
    """Run ``passes`` passes of an inline worker (the global registry) whose claims take one
    occurrence each: the order of the claims is the order the handlers run in."""
    from django_jobs.conf import get_settings
    from django_jobs.registry import registry
    from django_jobs.worker.loop import Worker

    settings = dataclasses.replace(get_settings(), CLAIM_BATCH_SIZE=1)
    worker = Worker(
        replica_id="one", clock=clock, jobs=registry, settings=settings, listen=False, inline=True
    )
    try:
        for _ in range(passes):
            worker.run_pass()
    finally:
        worker.close()
