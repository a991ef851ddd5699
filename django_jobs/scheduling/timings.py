"""The timings: ``cron``, ``rrule``, ``every``, ``at`` and ``after``, and what is asked of any
of them. Pure: no clock, no database.

Every timing answers ``between(start, end)``: the aware UTC instants in ``[start, end)`` at which
it plans occurrences, in order, after its skipped/repeated rules; and ``iter_from(start)``: the
same, lazily, from ``start`` on. Each lives in the module of its noun (``crons``, ``rrules``,
``elapsed``) and registers its kind there (``timing.register``); this module imports them all,
reads one back from a ``Schedule`` record by its registered kind, says what a record's kind
is (``kind_of``, ``one_off_kinds``, ``is_local``), and asks any timing where an instant
stands. Every name it ever held is still importable from here.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..clock import ensure_aware_utc
from . import rrules  # noqa: F401  (registers the rrule kind)
from .crons import Cron, cron
from .elapsed import EPOCH, After, At, Every, after, at, every
from .policies import TimingKind
from .timing import InvalidTiming, Timing, bounds, kinds_where, registered, wall_clock_fields
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
    "fixed_instant_kinds",
    "from_record",
    "is_local",
    "is_utc",
    "kind_of",
    "kinds",
    "neighbours",
    "one_off_kinds",
    "produces",
    "wall_clock_fields",
]


def kinds() -> dict[str, type[Timing]]:
    """Every registered timing kind by name: ``TimingKind``'s order, then any other by name."""
    order = {kind.value: n for n, kind in enumerate(TimingKind)}
    found = registered()
    return {k: found[k] for k in sorted(found, key=lambda k: (order.get(k, len(order)), k))}


def kind_of(kind: str) -> type[Timing] | None:
    """The timing class registered for a record's ``timing_kind``; None for one that is not
    a timing (``enqueued``: a job's policy record) or not registered."""
    return registered().get(kind)


def one_off_kinds() -> frozenset[str]:
    """The kinds that plan one instant, then are done (``at``, ``after``)."""
    return kinds_where("one_off")


def fixed_instant_kinds() -> frozenset[str]:
    """The one-off kinds whose instant is given, not counted from the record's creation
    (``at``): it may come before the record exists, where no plan pass starts. Asked for
    each record a sync writes: the set is kept until the registry changes."""
    return kinds_where("fixed_instant")


def is_local(record: Any) -> bool:
    """Whether a record (a ``Schedule`` row, or anything with its ``timing_kind`` and
    ``time_zone``) is business-local: a wall-clock kind in a zone that is not UTC."""
    cls = kind_of(record.timing_kind)
    return cls is not None and cls.wall_clock and not is_utc(record.time_zone)


def from_record(fields: Any) -> Timing:
    """The timing stored on a ``Schedule`` row (or any object with the same attributes), read
    by the kind registered for its ``timing_kind``."""
    kind = fields.timing_kind
    cls = kind_of(kind)
    if cls is None:
        raise InvalidTiming("timing_kind", f"unknown timing kind {kind!r}")
    return cls.from_record(fields).validate()


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
