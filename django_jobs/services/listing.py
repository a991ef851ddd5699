"""The operator's list of schedules (``manage.py jobs list``) and what one schedule's line says
for ``jobs inspect``'s next steps: newest outcome, failing streak, dead letters, disabled or
parked, next run.

The outcome columns are the dashboard's (``store.schedule_lines``): one statement per list,
two index probes per schedule (its dead letters, counted up to ``COUNT_CAP``, and its newest
``STREAK_DEPTH`` ended occurrences), however long its history; never a count of the whole
occurrence table. The lines come in the dashboard's order, those that most need attention
first (dead letters, then the longest failing streak), then by tenant and key; at most
``LIST_CAP`` of them, and the listing says when more match. Retired schedules are not listed
(they are counted, so the list can say how many it left out).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .. import permissions, store
from ..clock import ensure_aware_utc
from ..models import TERMINAL_STATES, Limit, Occurrence, OccurrenceState, Schedule, ScheduleStatus
from .dashboard import COUNT_CAP, STREAK_DEPTH, next_run
from .inspection import visible_schedules, with_recovery_points
from .rows import schedule_row

# The most lines one ``jobs list`` shows: a tenant can hold thousands of schedules.
LIST_CAP = 200
# The most lines ``--failing`` reads to find them: the failing schedules are among those with
# a dead letter or a failing streak, which the statement's order puts first.
FAILING_SCAN = 2_000
# An ended occurrence in one of these states makes its schedule failing.
FAILING = (OccurrenceState.FAILED, OccurrenceState.DEAD)


@dataclass(frozen=True)
class ListedSchedule:
    """One schedule's line: its newest ended outcome (completed, failed, dead or cancelled;
    None before the first), its failing streak (ended occurrences since the newest completed
    one, among its newest ``STREAK_DEPTH``), its dead letters (counted up to ``COUNT_CAP``),
    its next run (None unless it is active, enabled and not parked: no replica runs a draft;
    and None when nothing is planned within a year) and its last completion."""

    schedule: Schedule
    last_outcome: str | None
    failing_streak: int
    dead_letters: int
    next_run: datetime | None
    last_completed_at: datetime | None

    @property
    def dead_letters_capped(self) -> bool:
        """Whether the count stopped at ``COUNT_CAP`` (there may be more)."""
        return self.dead_letters >= COUNT_CAP

    @property
    def failing(self) -> bool:
        """Whether its newest ended occurrence failed or went dead."""
        return self.last_outcome in FAILING


@dataclass(frozen=True)
class Listing:
    """The lines of one ``jobs list``: at most ``cap``; ``more`` when others match too (or
    may: ``--failing`` reads at most ``FAILING_SCAN`` lines); ``retired``, the matching
    retired schedules, which are not listed."""

    lines: list[ListedSchedule]
    more: bool
    cap: int
    retired: int


@dataclass(frozen=True)
class Standing:
    """What ``jobs inspect`` suggests next for a schedule: its line (None for a retired one),
    its newest dead letter, and whether finished occurrences lie beyond its retention Limit
    (``jobs purge`` would delete some)."""

    line: ListedSchedule | None
    newest_dead: Occurrence | None
    beyond_limit: bool


def list_schedules(
    *,
    actor: Any,
    now: datetime,
    tenant: str | None = None,
    queue: str | None = None,
    dead: bool = False,
    failing: bool = False,
    cap: int = LIST_CAP,
) -> Listing:
    """The schedules ``actor`` may see (``visible_schedules``), of ``tenant`` and on ``queue``
    when given; only those with a dead letter (``dead``), only those whose newest ended
    occurrence failed or went dead (``failing``); at most ``cap``, those that most need
    attention first."""
    now = ensure_aware_utc(now, name="now")
    visible = visible_schedules(actor=actor, tenant=tenant)
    if queue is not None:
        visible = visible.filter(queue=queue)
    retired = visible.filter(status=ScheduleStatus.RETIRED).count()
    active = visible.exclude(status=ScheduleStatus.RETIRED)
    everything = tenant is None and queue is None and actor.has_perm("django_jobs.view_schedule")
    ids = None if everything else list(active.values_list("pk", flat=True))
    if ids == []:
        return Listing([], more=False, cap=cap, retired=retired)
    rows, more = _matching(ids, now=now, dead=dead, failing=failing, cap=cap)
    return Listing(_lines(rows, now=now), more=more, cap=cap, retired=retired)


def _matching(
    ids: list[int] | None, *, now: datetime, dead: bool, failing: bool, cap: int
) -> tuple[list[Any], bool]:
    """Up to ``cap`` lines of the schedules ``ids`` (None: every one) that pass the filters,
    and whether more do (or, for ``failing``, may).

    The statement orders by dead letters, then failing streak: the schedules with a dead
    letter come first, and a failing one has a dead letter or a streak, so each filter stops
    at the first line that cannot pass it."""
    limit = FAILING_SCAN if failing else cap + 1
    rows = _read_lines(ids, now=now, limit=limit)
    found: list[Any] = []
    for row in rows:
        if (dead and not row.dead) or (failing and not (row.dead or row.streak)):
            return found, False  # none of the rest can pass
        if failing and row.last_outcome not in FAILING:
            continue
        found.append(row)
        if len(found) > cap:
            return found[:cap], True
    return found, failing and len(rows) == limit  # read FAILING_SCAN lines: more may fail


def _read_lines(ids: list[int] | None, *, now: datetime, limit: int) -> list[Any]:
    """The dashboard's lines with an empty window (``since`` = ``now``): only the columns of
    the whole retained history are read, no window's outcomes or lateness."""
    return store.schedule_lines(
        ids, since=now, now=now, limit=limit, offset=0, cap=COUNT_CAP, streak_depth=STREAK_DEPTH
    )


def _lines(rows: list[Any], *, now: datetime) -> list[ListedSchedule]:
    """Each row with its schedule (and last completion, one probe each), in the rows' order."""
    ids = [row.schedule_id for row in rows]
    schedules = with_recovery_points(Schedule.objects.filter(pk__in=ids)).in_bulk()
    return [
        ListedSchedule(
            schedule=(schedule := schedules[row.schedule_id]),
            last_outcome=row.last_outcome,
            failing_streak=int(row.streak),
            dead_letters=int(row.dead),
            next_run=next_run(schedule, now),
            last_completed_at=schedule.last_completed_at,
        )
        for row in rows
    ]


def schedule_standing(schedule: Schedule, *, actor: Any, now: datetime) -> Standing:
    """The standing of the schedule row ``schedule``'s primary key names, if ``actor`` may
    view it (``permissions.Forbidden`` otherwise): its line as ``jobs list`` shows it, its
    newest dead letter, and whether a purge would delete finished occurrences now."""
    now = ensure_aware_utc(now, name="now")
    schedule = schedule_row(schedule, lock=False)
    permissions.require(actor, "view", schedule)
    rows = _read_lines([schedule.pk], now=now, limit=1)
    newest_dead = (
        Occurrence.objects.filter(schedule_id=schedule.pk, state=OccurrenceState.DEAD)
        .order_by("-scheduled_at")
        .first()
    )
    return Standing(
        line=_lines(rows, now=now)[0] if rows else None,
        newest_dead=newest_dead,
        beyond_limit=_beyond_limit(schedule, now=now),
    )


def _beyond_limit(schedule: Schedule, *, now: datetime) -> bool:
    """Whether a finished occurrence of ``schedule`` is scheduled before its retention cutoff
    (the later of ``now - keep_for`` and its ``keep_last``-th newest occurrence's instant, as
    ``store.purge_batch`` computes it): what ``jobs purge`` would delete. No Limit: False."""
    limit = Limit.objects.filter(schedule_id=schedule.pk).first()
    if limit is None:
        return False
    mine = Occurrence.objects.filter(schedule_id=schedule.pk)
    cutoffs = []
    # A keep_for reaching before year 1 keeps everything (the purge's SQL says NULL).
    if limit.keep_for is not None and limit.keep_for < now - datetime.min.replace(tzinfo=UTC):
        cutoffs.append(now - limit.keep_for)
    if limit.keep_last is not None and limit.keep_last > 0:
        newest = mine.order_by("-scheduled_at").values_list("scheduled_at", flat=True)
        nth = next(iter(newest[limit.keep_last - 1 : limit.keep_last]), None)
        if nth is not None:
            cutoffs.append(nth)
    if not cutoffs:
        return False
    return mine.filter(scheduled_at__lt=max(cutoffs), state__in=TERMINAL_STATES).exists()
