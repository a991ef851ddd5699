"""Deciding which instants of a schedule to plan, run or skip. Pure: ``now`` is a parameter.

An instant is *missed* when the planner finds it later than the schedule's ``max_delay``
(``instant + max_delay < now``): the worker was down, the store was out, the schedule was
disabled. The misfire policy decides what missed instants do:

- ``skip``: none runs; each is recorded as skipped (reason ``misfire``);
- ``replay_once``: the most recent runs; the others are skipped;
- ``replay_all``: the most recent ``max_catchup`` run, oldest first; older ones are skipped.

Skipped instants are recorded one row each up to ``SKIP_RECORD_CAP`` (the most recent ones);
older ones are summarised by count and range, so a per-second schedule after a 3-day outage
writes a hundred rows and one summary, not 259,200 rows.

Nothing here trusts the record to be small: however long the gap and whatever the caps say
(within their bounds, ``MAX_CATCHUP``), one call lists at most about ``max_catchup + 102``
missed instants and ``ON_TIME_LIMIT`` on-time ones, and counts at most ``HEAD_WINDOW`` of a
long gap; what is left is planned by the next pass. The pass's deadline reaches inside one
call too (``PlanRequest.expired``, asked between chunks of ``COUNT_CHUNK``): counting a long
gap stops there, and the next pass goes on from where it stopped. A calendar timing makes at
most ``MAX_INSTANTS_PER_DAY`` instants a day, so a chunk is at most that many.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import NamedTuple

from ..clock import ensure_aware_utc
from .policies import Misfire, Overlap
from .rrules import MAX_WALLS_PER_DAY, RRule
from .timing import EARLIEST_INSTANT
from .timings import Every, Timing

SKIP_RECORD_CAP = 100
# The most missed instants a schedule may replay (declarations refuse more; a row that says
# more is refused here, so no row can make the planner list millions of instants).
MAX_CATCHUP = 10_000
# How much of a long gap one pass counts, and how many on-time instants one pass plans, per
# schedule: a pass stays short whatever a record says, so a replica keeps heartbeating,
# claiming and enforcing timeouts while it catches up.
HEAD_WINDOW = timedelta(days=31)
ON_TIME_LIMIT = 10_000
# How much of a gap is counted between two looks at the pass's deadline: a day. Counting a day
# of a calendar timing walks at most ``timing.MAX_INSTANTS_PER_DAY`` wall times, or
# ``rrules.MAX_WALLS_PER_DAY`` with occurrences moved off excluded dates: measured at most
# about 0.1 s for the densest rule a week of excluded days moves (tests/
# test_trust_density_calendar.py), a fifth of the default pass budget.
COUNT_CHUNK = timedelta(days=1)
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class SkipSummary:
    """Missed instants skipped without a row of their own."""

    count: int
    first: datetime
    last: datetime


@dataclass(frozen=True)
class PlanRequest:
    timing: Timing
    max_delay: timedelta
    misfire: Misfire
    max_catchup: int
    last_scheduled_at: datetime | None  # recovery point: instants up to here are planned
    since: datetime  # nothing scheduled before this (the record's creation) is planned
    now: datetime
    # Already planned, never started, and now missed: the policy decides them with the new ones.
    pending_missed: Sequence[datetime] = ()
    overlap: Overlap = Overlap.ALLOW
    previous_running: bool = False  # an occurrence of this schedule is processing now
    # Instants up to ``now + ahead`` are planned now, on time, ahead of their instant (their
    # rows wait, unclaimed, until then). Overlap ``skip`` is not applied to those: whether the
    # previous run still runs is known only when they come due (the claim skips them then).
    ahead: timedelta = timedelta(0)
    # Whether the pass's deadline has passed (the worker's monotonic budget; never, by
    # default): asked between chunks of a long count, after the first, so a decision stops
    # there and leaves the rest to the next pass. Injected, so this module reads no clock.
    expired: Callable[[], bool] = field(default=lambda: False, compare=False)


@dataclass(frozen=True)
class PlanDecision:
    run: list[datetime] = field(default_factory=list)  # new instants, on time
    replay: list[datetime] = field(default_factory=list)  # new instants, missed, run late
    skip: list[tuple[datetime, str]] = field(default_factory=list)  # new: (instant, reason)
    summary: SkipSummary | None = None
    catch_up: list[datetime] = field(default_factory=list)  # pending missed ones that run late
    skip_pending: list[tuple[datetime, str]] = field(default_factory=list)  # (instant, reason)
    last_scheduled_at: datetime | None = None
    next_due_at: datetime | None = None
    more: bool = False  # the pass stopped early: the schedule is due again at once


class _Missed:
    """Missed instants in order: counts them all, keeps only the most recent ``keep``."""

    def __init__(self, keep: int) -> None:
        self.count = 0
        self.first: datetime | None = None
        self.recent: deque[datetime] = deque(maxlen=keep)

    def add(self, instant: datetime) -> None:
        if self.first is None:
            self.first = instant
        self.count += 1
        self.recent.append(instant)

    def add_count(self, count: int, first: datetime) -> None:
        if count and self.first is None:
            self.first = first
        self.count += count


def first_due(timing: Timing, *, since: datetime, now: datetime) -> datetime:
    """The first ``next_due_at`` of a schedule created at ``since`` with no recovery point:
    its first instant from ``since`` on, when that lies after ``now``, since ``plan`` has
    nothing to do for it before then; otherwise ``now`` (plan it at the next pass).

    A new schedule due tomorrow then costs no plan pass today: a deploy that syncs thousands
    of them leaves the replicas' first passes to the work that is due.
    """
    now = ensure_aware_utc(now, name="now")
    first = next(iter(timing.iter_from(ensure_aware_utc(since, name="since"))), None)
    return first if first is not None and first > now else now


def plan_unreached(request: PlanRequest) -> PlanDecision | None:
    """The decision for the instant of an ``at`` one-off (a ``fixed_instant`` kind) that
    ``plan`` never reaches, or None when there is none.

    ``plan`` starts at the record's creation (``since``), or just after its recovery point, so
    a one-off whose instant had passed when its record was written (a deploy that lands late,
    the instant moved to one already past) would plan nothing, ever. Its instant is decided as
    ``plan`` decides any instant: on time within ``max_delay`` (it runs now), otherwise missed,
    and its misfire policy runs it late or skips it. A recurring timing owes nothing from
    before its record existed, and ``after`` counts from the creation: None for them, as for
    an instant still to come (``plan`` reaches it).
    """
    timing = request.timing
    if not timing.fixed_instant:
        return None
    instant = next(iter(timing.validate().iter_from(EARLIEST_INSTANT)), None)
    if instant is None:
        return None
    start = ensure_aware_utc(request.since, name="since")
    if request.last_scheduled_at is not None:
        start = max(start, ensure_aware_utc(request.last_scheduled_at, name="last") + _TICK)
    if instant >= start or instant > ensure_aware_utc(request.now, name="now"):
        return None
    return plan(replace(request, since=instant, last_scheduled_at=None))


def plan(request: PlanRequest) -> PlanDecision:
    """What to do with every instant after the recovery point up to ``now``, or, when that is
    more than one pass should do, with the first part of them (``PlanDecision.more``).

    Steps:
    1. from just after ``last_scheduled_at`` (or from ``since``), instants later than
       ``max_delay`` are missed. Only the most recent ``keep`` of them can run or get a row
       of their own, so the rest are counted, not listed (arithmetic for intervals, a sparse
       count for cron). A gap longer than ``HEAD_WINDOW`` whose missed instants would all be
       summarised anyway is counted one window per pass (``_head_only``), or less: counting
       stops at the pass's deadline (``expired``), after a ``COUNT_CHUNK`` at least;
    2. instants from ``now - max_delay`` up to ``now`` are on time, at most ``ON_TIME_LIMIT``
       per pass; the rest wait for the next pass;
    3. apply the misfire policy to the missed ones, together with ``pending_missed``;
    4. the first instant after ``now`` is the schedule's next due instant (``now`` itself
       when the pass left work for the next one).

    With ``ahead``, the instants up to ``now + ahead`` are on time in step 2 too, and the first
    instant after that is the next due one: a burst's rows are written before it, not in it.
    Which instants are missed is still decided against ``now``, and overlap ``skip`` only for
    instants up to ``now`` (the claim decides it for the later ones, when they come due).

    Each pass costs at most about ``keep`` listed instants, ``HEAD_WINDOW`` of counting and
    ``ON_TIME_LIMIT`` instants, whatever the record says: a schedule disabled for a year, or
    a row claiming to be created in 1970, is planned in bounded passes.
    """
    now = ensure_aware_utc(request.now, name="now")
    start = ensure_aware_utc(request.since, name="since")
    if request.last_scheduled_at is not None:
        start = max(start, ensure_aware_utc(request.last_scheduled_at, name="last") + _TICK)
    if not 0 <= request.max_catchup <= MAX_CATCHUP:
        raise ValueError(f"max_catchup must be from 0 to {MAX_CATCHUP}, got {request.max_catchup}")
    # Enough of the most recent missed instants to run, record, and name the last summarised.
    keep = request.max_catchup + SKIP_RECORD_CAP + 2
    pending = sorted(ensure_aware_utc(i, name="pending_missed") for i in request.pending_missed)
    late_before = now - request.max_delay  # instants before this are missed
    timing = request.timing
    if request.ahead < timedelta(0):
        raise ValueError(f"ahead must not be negative, got {request.ahead}")
    horizon = now + request.ahead
    if not isinstance(timing, Every) and start + HEAD_WINDOW < late_before:
        # Count the head first, up to the pass's deadline; it is all skipped if at least
        # ``keep`` missed instants follow it (counted back from ``late_before``).
        counted = _counted(timing, start, start + HEAD_WINDOW, request.expired)
        if _at_least(timing, counted.reached, late_before, keep):
            return _head_only(timing, start, counted, now=now)
    missed = _missed(timing, start, late_before, keep, request.expired, now=now)
    if isinstance(missed, PlanDecision):
        return missed  # the deadline came while counting the gap: the rest next pass
    on_time: list[datetime] = []
    next_due, more = None, False
    for instant in timing.iter_from(max(start, late_before)):
        if instant > horizon:
            next_due = instant
            break
        if len(on_time) == ON_TIME_LIMIT:
            next_due, more = now, True  # the rest next pass
            break
        on_time.append(instant)
    upper = on_time[-1] + _TICK if more else horizon + _TICK
    excluded = _excluded(timing, start, upper, request.expired)
    ahead = [i for i in on_time if i > now]  # in order: the last ones
    on_time = on_time[: len(on_time) - len(ahead)]
    return _decide(
        request, missed, pending, on_time, next_due, more=more, excluded=excluded, ahead=ahead
    )


def _excluded(
    timing: Timing, start: datetime, end: datetime, expired: Callable[[], bool]
) -> list[datetime]:
    """The instants in ``[start, end)`` a business calendar takes away (an ``rrule`` with
    ``on_excluded="skip"``): recorded as skipped, reason ``excluded``, the most recent
    ``SKIP_RECORD_CAP`` of them, looked for back from ``end`` in growing windows (until the
    pass's deadline, after the first). Other timings exclude nothing."""
    if not isinstance(timing, RRule):
        return []
    # A window walks at most ``MAX_WALLS_PER_DAY`` wall times a day of it: the widest is
    # as long as it takes the rule to walk that many a day (8 days of the densest rule).
    widest = COUNT_CHUNK * max(1, MAX_WALLS_PER_DAY // timing.recurrence.per_day())
    found: list[datetime] = []
    window, hi = COUNT_CHUNK, end
    while hi > start and len(found) < SKIP_RECORD_CAP:
        lo = max(start, hi - window)
        found = timing.excluded_between(lo, hi) + found
        if expired():
            break
        hi, window = lo, min(window * 2, widest)
    return found[-SKIP_RECORD_CAP:]


def _grown(window: timedelta, covered: timedelta, found: int, count: int) -> timedelta:
    """The next window of a search back for ``count`` instants that found ``found`` in
    ``covered``: twice as long, but not much longer than the rate so far says is left."""
    if not found:
        return window * 2
    return min(window * 2, covered * (count - found) / found + COUNT_CHUNK)


def _at_least(timing: Timing, start: datetime, end: datetime, count: int) -> bool:
    """Whether ``[start, end)`` holds at least ``count`` instants, counting back from ``end``
    in growing windows: costs about what the most recent ``count`` instants cost."""
    found, window, hi = 0, COUNT_CHUNK, end
    while hi > start:
        lo = max(start, hi - window)
        found += timing.count_between(lo, hi)
        if found >= count:
            return True
        hi, window = lo, _grown(window, end - lo, found, count)
    return False


class _Counted(NamedTuple):
    """What ``_counted`` found: how many ``instants``, where it stopped (``reached``), and the
    last chunk that held one (``last_chunk``: its bounds, or None)."""

    instants: int
    reached: datetime
    last_chunk: tuple[datetime, datetime] | None


def _counted(
    timing: Timing, start: datetime, end: datetime, expired: Callable[[], bool]
) -> _Counted:
    """The instants in ``[start, end)``, counted a ``COUNT_CHUNK`` at a time until the pass's
    deadline (after the first chunk); the count and where it stopped (``end``: all)."""
    count, lo, last_chunk = 0, start, None
    while lo < end:
        hi = min(end, lo + COUNT_CHUNK)
        found = timing.count_between(lo, hi)
        if found:
            count, last_chunk = count + found, (lo, hi)
        lo = hi
        if expired():
            break
    return _Counted(count, lo, last_chunk)


def _head_only(
    timing: Timing, start: datetime, counted: _Counted, *, now: datetime
) -> PlanDecision:
    """A pass over ``[start, reached)`` of a long gap (``counted``: how many instants it
    holds, and ``reached``), all skipped whatever the policy (at least ``keep`` missed
    instants follow them): summarised by count and range, the recovery point moved to
    ``reached``, and the schedule due again at once.

    The last instant summarised is listed from the last chunk that held one: a search back
    from ``reached`` (``neighbours``) could list many days of a dense rule whose occurrences
    a run of excluded days moved away."""
    summary = None
    if counted.instants:
        assert counted.last_chunk is not None
        first = next(iter(timing.iter_from(start)))
        last = timing.between(*counted.last_chunk)[-1]
        summary = SkipSummary(counted.instants, first, last)
    return PlanDecision(
        summary=summary, last_scheduled_at=counted.reached - _TICK, next_due_at=now, more=True
    )


def _missed(
    timing: Timing,
    start: datetime,
    end: datetime,
    keep: int,
    expired: Callable[[], bool],
    *,
    now: datetime,
) -> _Missed | PlanDecision:
    """The missed instants ``[start, end)``: the most recent ``keep`` listed, the others
    counted (intervals arithmetically; other timings by ``count_between`` before the
    listed tail, found counting back from ``end``). If the pass's deadline comes before the
    count reaches the tail, the decision for what was counted (``_head_only``) instead."""
    missed = _Missed(keep)
    if end <= start:
        return missed
    if isinstance(timing, Every):
        if timing.count_between(start, end) > keep:
            tail_start = end - timing.interval * keep
            first = timing.anchor + timing.interval * timing.index_at_or_after(start)
            missed.add_count(timing.count_between(start, tail_start), first)
            start = tail_start
        for instant in timing.between(start, end):
            missed.add(instant)
        return missed
    tail: list[datetime] = []
    window, lo = timedelta(hours=1), end
    while len(tail) <= keep and lo > start:
        hi, lo = lo, max(start, lo - window)
        tail = timing.between(lo, hi) + tail
        window = _grown(window, end - lo, len(tail), keep + 1)
    if lo > start:  # more before the tail: counted
        before = _counted(timing, start, lo, expired)
        if before.reached < lo:  # all before more than ``keep`` missed ones: skipped, summarised
            return _head_only(timing, start, before, now=now)
        if before.instants:
            missed.add_count(before.instants, next(iter(timing.iter_from(start))))
    for instant in tail:
        missed.add(instant)
    return missed


def _decide(
    request: PlanRequest,
    missed: _Missed,
    pending: list[datetime],
    on_time: list[datetime],
    next_due: datetime | None,
    *,
    more: bool,
    excluded: Sequence[datetime] = (),
    ahead: list[datetime] | None = None,
) -> PlanDecision:
    """Apply the misfire and overlap policies (``ahead``: on-time instants after now, which
    run: overlap ``skip`` is the claim's to decide for them).

    Pending missed occurrences (rows that exist, never started) are all older than the new
    missed instants, so ``pending + recent`` is every candidate in order. Pending ones that do
    not run are skipped row by row; new skipped ones get rows up to ``SKIP_RECORD_CAP`` and a
    summary beyond it.
    """
    recent = list(missed.recent)
    candidates = [*pending, *recent]
    if request.misfire == Misfire.SKIP:
        replayed: list[datetime] = []
    elif request.misfire == Misfire.REPLAY_ONCE:
        replayed = candidates[-1:]
    else:
        replayed = candidates[-request.max_catchup :] if request.max_catchup else []
    chosen = set(replayed)
    skipped_new = [i for i in recent if i not in chosen]
    recorded = skipped_new[-SKIP_RECORD_CAP:]
    replayed_new = [i for i in recent if i in chosen]
    summary = None
    unrecorded = missed.count - len(replayed_new) - len(recorded)
    if unrecorded > 0:
        assert missed.first is not None
        # ``keep`` guarantees the newest summarised instant is still in ``skipped_new``.
        summary = SkipSummary(unrecorded, missed.first, skipped_new[-len(recorded) - 1])
    # Overlap skip: everything that would start now is skipped while the previous one runs
    # (instants planned ahead, after now, are the claim's to skip when they come due).
    overlapped = request.overlap == Overlap.SKIP and request.previous_running
    ahead = ahead or []
    considered = [*recorded, *replayed_new, *on_time, *ahead, *excluded]
    if summary is not None:
        considered.append(summary.last)
    if request.last_scheduled_at is not None:
        considered.append(request.last_scheduled_at)
    skip_new = [(i, "misfire") for i in recorded] + [(i, "excluded") for i in excluded]
    skip_pending = [(i, "misfire") for i in pending if i not in chosen]
    if overlapped:
        skip_new += [(i, "overlap") for i in [*replayed_new, *on_time]]
        skip_pending += [(i, "overlap") for i in pending if i in chosen]
    return PlanDecision(
        run=ahead if overlapped else on_time + ahead,
        replay=[] if overlapped else replayed_new,
        skip=sorted(skip_new),
        summary=summary,
        catch_up=[] if overlapped else [i for i in pending if i in chosen],
        skip_pending=sorted(skip_pending),
        last_scheduled_at=max(considered, default=None),
        next_due_at=next_due,
        more=more,
    )
