"""The dashboard: how the work a user may see is going, over a window they choose.

Replicas (with the ``view_replica`` permission: they are the fleet's, not a tenant's), due
work not started and its age, one line per schedule (newest outcome, failing streak,
lateness p50/p99 over the window, next run, dead letters), outcome counts over time, and by
queue: due work, what runs, and (with ``view_replica``) the queue's limit and whether a live
replica serves it.
Everything is scoped like every other page (``permissions.visible``) and read with one
statement each (``store.console``), none counting the whole occurrence table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .. import permissions, store
from ..clock import ensure_aware_utc
from ..conf import get_settings
from ..models import OccurrenceState, Replica, ReplicaState, Schedule, ScheduleStatus
from ..scheduling import timings, upcoming
from .health import served_queues

# The windows a user may choose, by name: (span, buckets of the chart).
WINDOWS: dict[str, tuple[timedelta, int]] = {
    "1h": (timedelta(hours=1), 60),
    "24h": (timedelta(hours=24), 48),
    "7d": (timedelta(days=7), 56),
}
DEFAULT_WINDOW = "24h"
LINES_PER_PAGE = 50
# Counts the dashboard stops at ("10,000+"): a backlog or a dead-letter pile is news at any
# size beyond, and counting further would read it all at every page load.
COUNT_CAP = 10_000
# How many of a schedule's newest ended occurrences its failing streak is read from.
STREAK_DEPTH = 50
# Instants searched for a schedule's next run: a year, enough for a yearly rule.
NEXT_RUN_HORIZON = timedelta(days=366)
# The chart's states, in the order they stack, each with its colour.
CHART_STATES = (
    (OccurrenceState.COMPLETED, "#2e7d32"),
    (OccurrenceState.SKIPPED, "#9e9e9e"),
    (OccurrenceState.CANCELLED, "#6a1b9a"),
    (OccurrenceState.FAILED, "#ef6c00"),
    (OccurrenceState.DEAD, "#c62828"),
    (OccurrenceState.PROCESSING, "#1565c0"),
    (OccurrenceState.SCHEDULED, "#90caf9"),
)


@dataclass(frozen=True)
class Line:
    """One schedule's line."""

    schedule: Schedule
    last_outcome: str | None
    failing_streak: int
    completed: int
    failing: int
    skipped: int
    late_p50: timedelta | None
    late_p99: timedelta | None
    next_run: datetime | None
    dead: int


@dataclass(frozen=True)
class Bucket:
    start: datetime
    end: datetime
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class ReplicaLine:
    replica: Replica
    heartbeat_age: timedelta
    stale: bool


@dataclass(frozen=True)
class QueueLine:
    """One queue's line: its due work not started and its running occurrences, of the
    schedules the user may see; its fleet-wide limit and whether a live replica serves it
    (None for a user who may not see the fleet)."""

    name: str
    due: int  # up to COUNT_CAP
    running: int
    max_running: int | None
    served: bool | None


@dataclass(frozen=True)
class Dashboard:
    now: datetime
    window: str
    since: datetime
    replicas: list[ReplicaLine] | None  # None: the user may not see the fleet
    due: int  # up to COUNT_CAP
    oldest_due_age: timedelta | None
    lines: list[Line]
    schedules: int  # the visible schedules that are not retired
    page: int
    pages: int
    buckets: list[Bucket] = field(default_factory=list)
    queues: list[QueueLine] = field(default_factory=list)


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=float(value))


def next_run(schedule: Schedule, now: datetime) -> datetime | None:
    """The next instant the timing plans after ``now``, within a year; None for a record no
    replica runs (draft, retired, disabled), one the planner parks, or an enqueued job's
    policy record (which plans nothing)."""
    runs = schedule.status == ScheduleStatus.ACTIVE and schedule.enabled
    if not runs or schedule.timing_kind == "enqueued" or schedule.parked_field:
        return None
    try:
        timing = timings.from_record(schedule)
        found = upcoming.instants(timing, now=now, count=1, horizon=NEXT_RUN_HORIZON)
    except (ValueError, OverflowError):
        return None
    return found[0] if found else None


def may_see_replicas(actor: Any) -> bool:
    return bool(getattr(actor, "is_active", False) and actor.has_perm("django_jobs.view_replica"))


def replica_lines(*, now: datetime) -> list[ReplicaLine]:
    """The replicas that have not stopped, with their heartbeat's age; stale past three
    heartbeats (as ``jobs health`` judges them by default)."""
    max_age = timedelta(seconds=3 * get_settings().HEARTBEAT_SECONDS)
    rows = Replica.objects.exclude(state=ReplicaState.STOPPED).order_by("host", "id")
    return [ReplicaLine(r, now - r.heartbeat_at, now - r.heartbeat_at > max_age) for r in rows]


def dashboard(
    *, actor: Any, now: datetime, window: str = DEFAULT_WINDOW, page: int = 1
) -> Dashboard:
    """What ``actor`` may see, at ``now``, over ``window`` (a key of ``WINDOWS``; another
    value is the default). ``page`` of the schedules' lines, ``LINES_PER_PAGE`` a page."""
    now = ensure_aware_utc(now, name="now")
    if window not in WINDOWS:
        window = DEFAULT_WINDOW
    span, buckets = WINDOWS[window]
    since = now - span
    visible = permissions.visible(actor).exclude(status=ScheduleStatus.RETIRED)
    ids = (
        None
        if actor.has_perm("django_jobs.view_schedule")
        else list(visible.values_list("pk", flat=True))
    )
    total = visible.count()
    pages = max(1, -(-total // LINES_PER_PAGE))
    page = min(max(page, 1), pages)
    due, oldest = store.due_work(ids, now=now, cap=COUNT_CAP)
    rows = store.schedule_lines(
        ids,
        since=since,
        now=now,
        limit=LINES_PER_PAGE,
        offset=(page - 1) * LINES_PER_PAGE,
        cap=COUNT_CAP,
        streak_depth=STREAK_DEPTH,
    )
    schedules = Schedule.objects.in_bulk([row.schedule_id for row in rows])
    lines = [
        Line(
            schedule=schedules[row.schedule_id],
            last_outcome=row.last_outcome,
            failing_streak=row.streak,
            completed=row.completed,
            failing=row.failing,
            skipped=row.skipped,
            late_p50=_seconds(row.late_p50),
            late_p99=_seconds(row.late_p99),
            next_run=next_run(schedules[row.schedule_id], now),
            dead=row.dead,
        )
        for row in rows
    ]
    return Dashboard(
        now=now,
        window=window,
        since=since,
        replicas=replica_lines(now=now) if may_see_replicas(actor) else None,
        due=due,
        oldest_due_age=now - oldest if oldest else None,
        lines=lines,
        schedules=total,
        page=page,
        pages=pages,
        buckets=_buckets(ids, since=since, now=now, buckets=buckets),
        queues=queue_lines(ids, now=now, fleet=may_see_replicas(actor)),
    )


def queue_lines(ids: list[int] | None, *, now: datetime, fleet: bool) -> list[QueueLine]:
    """Each queue with due or running work of the schedules ``ids`` (None: every one); for a
    user who may see the fleet (``fleet``), also each declared queue (``DJANGO_JOBS["QUEUES"]``),
    with its limit and whether a live replica serves it."""
    found = {
        row.queue: (int(row.due), int(row.running))
        for row in store.queue_work(ids, now=now, cap=COUNT_CAP)
    }
    if not fleet:
        return [QueueLine(q, due, running, None, None) for q, (due, running) in found.items()]
    limits = get_settings().max_running
    max_age = timedelta(seconds=3 * get_settings().HEARTBEAT_SECONDS)
    served = served_queues(now=now, max_age=max_age)
    return [
        QueueLine(
            name,
            *found.get(name, (0, 0)),
            max_running=limits.get(name),
            served=served is None or name in served,
        )
        for name in sorted(set(found) | set(limits))
    ]


def _buckets(
    ids: list[int] | None, *, since: datetime, now: datetime, buckets: int
) -> list[Bucket]:
    span = (now - since) / buckets
    counts: list[dict[str, int]] = [{} for _ in range(buckets)]
    for row in store.outcomes_by_bucket(ids, since=since, now=now, buckets=buckets):
        if 1 <= row.bucket <= buckets:
            counts[row.bucket - 1][row.state] = row.occurrences
    return [Bucket(since + span * i, since + span * (i + 1), counts[i]) for i in range(buckets)]
