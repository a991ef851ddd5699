"""Small helpers shared by the store tests."""

from __future__ import annotations

from datetime import datetime, timedelta

from django_jobs import store
from django_jobs.models import Schedule
from django_jobs.store import Lease, PlannedOccurrence

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


def claim(owner: str, now: datetime, limit: int = 10, **kwargs) -> list[Lease]:
    return store.claim(owner=owner, now=now, lease_for=LEASE, limit=limit, **kwargs)
