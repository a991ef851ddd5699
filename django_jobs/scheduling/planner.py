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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..clock import ensure_aware_utc
from .policies import Misfire, Overlap
from .timings import Every, Timing

SKIP_RECORD_CAP = 100
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


def plan(request: PlanRequest) -> PlanDecision:
    """What to do with every instant after the recovery point up to ``now``.

    Steps:
    1. iterate the timing from just after ``last_scheduled_at`` (or from ``since``);
    2. sort instants up to ``now`` into missed and on time;
    3. apply the misfire policy to the missed ones, together with ``pending_missed``;
    4. the first instant after ``now`` is the schedule's next due instant.
    """
    now = ensure_aware_utc(request.now, name="now")
    start = ensure_aware_utc(request.since, name="since")
    if request.last_scheduled_at is not None:
        start = max(start, ensure_aware_utc(request.last_scheduled_at, name="last") + _TICK)
    # Enough of the most recent missed instants to run, record, and name the last summarised.
    keep = request.max_catchup + SKIP_RECORD_CAP + 2
    missed = _Missed(keep)  # new missed instants only: pending ones have rows already
    pending = sorted(ensure_aware_utc(i, name="pending_missed") for i in request.pending_missed)
    late_before = now - request.max_delay  # instants before this are missed
    on_time: list[datetime] = []
    next_due = None
    for instant in _instants(request.timing, start, late_before, missed, keep):
        if instant > now:
            next_due = instant
            break
        if instant < late_before:
            missed.add(instant)
        else:
            on_time.append(instant)
    return _decide(request, missed, pending, on_time, next_due)


def _instants(
    timing: Timing, start: datetime, late_before: datetime, missed: _Missed, keep: int
) -> Iterable[datetime]:
    """The timing's instants from ``start``; for intervals, long runs of missed instants are
    counted arithmetically instead of one by one."""
    if isinstance(timing, Every) and timing.count_between(start, late_before) > keep:
        tail_start = late_before - timing.interval * keep
        first = timing.anchor + timing.interval * timing.index_at_or_after(start)
        missed.add_count(timing.count_between(start, tail_start), first)
        start = tail_start
    return timing.iter_from(start)


def _decide(
    request: PlanRequest,
    missed: _Missed,
    pending: list[datetime],
    on_time: list[datetime],
    next_due: datetime | None,
) -> PlanDecision:
    """Apply the misfire and overlap policies.

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
    # Overlap skip: everything that would start now is skipped while the previous one runs.
    overlapped = request.overlap == Overlap.SKIP and request.previous_running
    considered = [*recorded, *replayed_new, *on_time]
    if summary is not None:
        considered.append(summary.last)
    if request.last_scheduled_at is not None:
        considered.append(request.last_scheduled_at)
    skip_new = [(i, "misfire") for i in recorded]
    skip_pending = [(i, "misfire") for i in pending if i not in chosen]
    if overlapped:
        skip_new += [(i, "overlap") for i in [*replayed_new, *on_time]]
        skip_pending += [(i, "overlap") for i in pending if i in chosen]
    return PlanDecision(
        run=[] if overlapped else on_time,
        replay=[] if overlapped else replayed_new,
        skip=sorted(skip_new),
        summary=summary,
        catch_up=[] if overlapped else [i for i in pending if i in chosen],
        skip_pending=sorted(skip_pending),
        last_scheduled_at=max(considered, default=None),
        next_due_at=next_due,
    )
