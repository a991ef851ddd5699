"""The timings: ``cron``, ``rrule``, ``every``, ``at`` and ``after``, and what is asked of any
of them. Pure: no clock, no database.

Every timing answers ``between(start, end)``: the aware UTC instants in ``[start, end)`` at which
it plans occurrences, in order, after its skipped/repeated rules; and ``iter_from(start)``: the
same, lazily, from ``start`` on. Each lives in the module of its noun (``crons``, ``rrules``,
``elapsed``); this module reads one back from a ``Schedule`` record and asks any of them where
an instant stands. Every name it ever held is still importable from here.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..clock import ensure_aware_utc
from . import rrules
from .crons import Cron, cron
from .elapsed import EPOCH, After, At, Every, after, at, every
from .policies import TimingKind
from .timing import InvalidTiming, Timing, bounds, wall_clock_fields
from .wall_clock import (
    MAX_REASON,
    UTC_NAMES,
    WALL_MARGIN,
    check_wall_clock,
    chosen_choices,
    is_utc,
)

__all__ = [
    "EPOCH",
    "MAX_REASON",
    "UTC_NAMES",
    "WALL_MARGIN",
    "After",
    "At",
    "Cron",
    "Every",
    "InvalidTiming",
    "Timing",
    "after",
    "at",
    "bounds",
    "check_wall_clock",
    "chosen_choices",
    "cron",
    "every",
    "from_record",
    "is_utc",
    "neighbours",
    "produces",
    "wall_clock_fields",
]


def from_record(fields: Any) -> Timing:
    """The timing stored on a ``Schedule`` row (or any object with the same attributes)."""
    kind = fields.timing_kind
    timing: Timing
    if kind == TimingKind.CRON:
        timing = Cron(
            fields.cron,
            fields.time_zone,
            fields.skipped_time,
            fields.repeated_time,
            getattr(fields, "zone_reason", ""),
        )
    elif kind == TimingKind.INTERVAL:
        timing = Every(fields.interval, fields.anchor or EPOCH)
    elif kind == TimingKind.AT:
        timing = At(fields.run_at)
    elif kind == TimingKind.AFTER:
        timing = After(fields.delay, created_at=fields.run_at - fields.delay)
    elif kind == TimingKind.RRULE:
        timing = rrules.from_fields(fields)
    else:
        raise InvalidTiming("timing_kind", f"unknown timing kind {kind!r}")
    return timing.validate()


def produces(timing: Timing, instant: datetime) -> bool:
    """Whether ``instant`` is one of the timing's instants."""
    instant = ensure_aware_utc(instant, name="instant")
    return next(iter(timing.iter_from(instant)), None) == instant


_NEIGHBOUR_WINDOWS = [timedelta(minutes=1) * 8**n for n in range(9)]  # 1 minute to 32 years


def neighbours(timing: Timing, instant: datetime) -> tuple[datetime | None, datetime | None]:
    """The timing's last instant before ``instant`` and its first after it (None where there
    is none). Looks back in growing windows, so a frequent timing lists few instants."""
    instant = ensure_aware_utc(instant, name="instant")
    following = next(iter(timing.iter_from(instant + timedelta(microseconds=1))), None)
    for window in _NEIGHBOUR_WINDOWS:
        try:
            earlier = timing.between(instant - window, instant)
        except OverflowError:
            break
        if earlier:
            return earlier[-1], following
    return None, following
