"""What an operator may look at: finding schedules and occurrences, and inspecting them.

Every lookup an interface makes goes through here, scoped by ``permissions``: an unknown
schedule and one the actor may not see answer alike (no existence leak). Reads take no lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict

from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.functions import Greatest

from .. import permissions
from ..clock import ensure_aware_utc
from ..exceptions import JobsError
from ..models import (
    CLAIMABLE_STATES,
    STARTED_AND_ENDED,
    Attempt,
    Occurrence,
    OccurrenceState,
    Schedule,
    ScheduleStatus,
)
from ..scheduling import timings, upcoming
from .rows import need_same_tenant, occurrence_row, parse_key, schedule_row

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class RecoveryPoints(TypedDict):
    """What ``with_recovery_points`` adds to each schedule."""

    last_started_at: datetime | None
    last_completed_at: datetime | None


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


def with_recovery_points(
    rows: QuerySet[Schedule],
) -> QuerySet[WithAnnotations[Schedule, RecoveryPoints]]:
    """``rows`` with each schedule's last start and last completion, read from its
    occurrences in the same query: ``last_started_at`` (the latest ``started_at``) and
    ``last_completed_at`` (the latest ``finished_at`` of a completed one); ``None`` before the
    first.

    Claims and completions do not write them on the schedule row. Each is one index probe
    per schedule (the partial indexes ``django_jobs_occurrence_finish`` and ``_start``, and
    ``_live`` for runs not ended), however long its history. Only retained occurrences
    count, and a replayed occurrence waiting again is not a completion until it completes
    again.
    """
    mine = Occurrence.objects.filter(schedule=OuterRef("pk")).order_by()
    started = mine.filter(started_at__isnull=False).order_by("-started_at").values("started_at")
    completed = mine.filter(state=OccurrenceState.COMPLETED).order_by("-finished_at")
    return rows.annotate(
        last_started_at=Greatest(
            Subquery(started.filter(state__in=CLAIMABLE_STATES)[:1]),
            Subquery(started.filter(state__in=STARTED_AND_ENDED)[:1]),
        ),
        last_completed_at=Subquery(completed.values("finished_at")[:1]),
    )


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
    last_started_at: datetime | None  # recovery points, from the occurrences
    last_completed_at: datetime | None


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
    started, completed = (
        with_recovery_points(Schedule.objects.filter(pk=schedule.pk))
        .values_list("last_started_at", "last_completed_at")
        .get()
    )
    try:
        timing = timings.from_record(schedule)
        next_runs = upcoming.instants(timing, now=now, count=5, horizon=timedelta(days=7))
    except (ValueError, OverflowError):  # a record the planner parks as invalid
        next_runs = []
    return ScheduleReport(
        schedule=schedule,
        next_runs=next_runs,
        recent=recent,
        lateness=now - oldest if oldest else None,
        last_started_at=started,
        last_completed_at=completed,
    )


def inspect_occurrence(occurrence: Occurrence, *, actor: Any) -> list[Attempt]:
    """An occurrence's attempts, oldest first (the occurrence row carries state and lease),
    checked against the schedule of the occurrence row itself."""
    schedule, row = occurrence_row(occurrence, lock=False)
    permissions.require(actor, "view", schedule)
    need_same_tenant(schedule, row)
    return row.attempts_so_far()
