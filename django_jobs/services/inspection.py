"""What an operator may look at: finding schedules and occurrences, and inspecting them.

Every lookup an interface makes goes through here, scoped by ``permissions``: an unknown
schedule and one the actor may not see answer alike (no existence leak). Reads take no lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet

from .. import permissions
from ..clock import ensure_aware_utc, later
from ..exceptions import JobsError
from ..models import Attempt, Occurrence, Schedule, ScheduleStatus
from ..scheduling import timings
from .rows import need_same_tenant, occurrence_row, parse_key, schedule_row


def visible_schedules(
    *, actor: Any, tenant: str | None = None, key: str | None = None, retired: bool = True
) -> QuerySet[Schedule]:
    """The schedules ``actor`` may see, by tenant and key, optionally of one ``tenant`` or
    with one ``key``; without the retired ones unless ``retired``."""
    rows = permissions.visible(actor).order_by("tenant", "key")
    if tenant is not None:
        rows = rows.filter(tenant=tenant)
    if key is not None:
        rows = rows.filter(key=key)
    return rows if retired else rows.exclude(status=ScheduleStatus.RETIRED)


def find_schedule(*, actor: Any, tenant: str, key: str) -> Schedule:
    """The schedule (tenant, key) if ``actor`` may see it; ``JobsError`` otherwise, the same
    for a schedule that does not exist."""
    schedule = Schedule.objects.filter(tenant=tenant, key=key).first()
    if schedule is None or not permissions.allowed(actor, "view", schedule):
        where = f" in tenant {tenant!r}" if tenant else ""
        raise JobsError(f"no schedule {key!r}{where} that you may see")
    return schedule


def find_occurrence(ident: str, *, actor: Any, schedule: Schedule | None = None) -> Occurrence:
    """The occurrence ``ident`` names (of ``schedule``, when given) if ``actor`` may see its
    schedule; ``JobsError`` otherwise, the same for an id that cannot be one (``abc``).

    Only "no such row" is reported so: a database error is raised as it is, never mistaken
    for an occurrence that does not exist."""
    pk = parse_key(Occurrence, ident)
    found = (
        Occurrence.objects.select_related("schedule").filter(pk=pk).first()
        if pk is not None
        else None
    )
    if found is not None and schedule is not None and found.schedule_id != schedule.pk:
        found = None
    if found is None or not permissions.allowed(actor, "view", found.schedule):
        raise JobsError(f"no occurrence {ident!r} that you may see")
    return found


@dataclass(frozen=True)
class ScheduleReport:
    schedule: Schedule
    next_runs: list[datetime]
    recent: list[Occurrence]
    lateness: timedelta | None  # how long the oldest due, unstarted occurrence has waited


def inspect_schedule(schedule: Schedule, *, actor: Any, now: datetime) -> ScheduleReport:
    """The record, its state, its next runs and its recent occurrences with outcomes: of the
    row ``schedule``'s primary key names, read here (a read takes no lock)."""
    now = ensure_aware_utc(now, name="now")
    schedule = schedule_row(schedule, lock=False)
    permissions.require(actor, "view", schedule)
    recent = list(schedule.occurrences.order_by("-scheduled_at")[:10])
    oldest = (
        schedule.occurrences.filter(state__in=["scheduled", "failed"], due_at__lte=now)
        .order_by("due_at")
        .values_list("due_at", flat=True)
        .first()
    )
    try:
        upcoming = timings.from_record(schedule).between(now, later(now, timedelta(days=7)))[:5]
    except (ValueError, OverflowError):  # a record the planner parks as invalid
        upcoming = []
    return ScheduleReport(
        schedule=schedule,
        next_runs=upcoming,
        recent=recent,
        lateness=now - oldest if oldest else None,
    )


def inspect_occurrence(occurrence: Occurrence, *, actor: Any) -> list[Attempt]:
    """An occurrence's attempts, oldest first (the occurrence row carries state and lease),
    checked against the schedule of the occurrence row itself."""
    schedule, row = occurrence_row(occurrence, lock=False)
    permissions.require(actor, "view", schedule)
    need_same_tenant(schedule, row)
    return list(Attempt.objects.filter(occurrence_id=row.pk).order_by("number"))
