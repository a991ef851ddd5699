"""What every timing is: the ``Timing`` protocol, the error naming a bad argument, the window
every evaluation checks, and the ``Schedule`` record columns a timing writes.

Pure: no clock, no database. The timings themselves live in ``crons``, ``rrules`` and
``elapsed``; ``timings`` builds them and reads them back from a record.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, Protocol, Self

from ..clock import ensure_aware_utc
from .policies import RepeatedTime, SkippedTime, TimingKind


class InvalidTiming(ValueError):
    """A timing argument is invalid; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# The most wall times a calendar timing (``cron``, ``rrule``, with or without a business
# calendar) may produce on one local date: cron's densest, one a minute. Those timings are
# evaluated by walking their wall times, so a denser rule (an rrule every second: 86,400 a
# day) would make one plan decision walk millions of them. Counted from the rule's fields,
# never by walking; ``every()`` is counted by arithmetic and has its own bounds.
MAX_INSTANTS_PER_DAY = 24 * 60


def check_density(field: str, per_day: int, counted: str) -> None:
    """``InvalidTiming`` naming ``field`` if ``per_day`` (``counted``: how) is over the bound."""
    if per_day > MAX_INSTANTS_PER_DAY:
        raise InvalidTiming(
            field,
            f"produces up to {per_day:,} instants a day ({counted}); at most "
            f"{MAX_INSTANTS_PER_DAY:,} a day (one a minute, as cron's densest) are allowed",
        )


class Timing(Protocol):
    """What the planner asks of a timing (``Cron``, ``RRule``, ``Every``, ``At``, ``After``)."""

    @property
    def kind(self) -> TimingKind: ...

    def validate(self) -> Self: ...

    def between(self, start: datetime, end: datetime) -> list[datetime]: ...

    def count_between(self, start: datetime, end: datetime) -> int: ...

    def iter_from(self, start: datetime) -> Iterator[datetime]: ...

    def record_fields(self) -> dict[str, Any]: ...


def bounds(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """``start`` and ``end`` as aware UTC instants (a ``ValueError`` naming a naive one)."""
    return ensure_aware_utc(start, name="start"), ensure_aware_utc(end, name="end")


def wall_clock_fields(
    zone: str, skipped: SkippedTime, repeated: RepeatedTime, reason: str
) -> dict[str, Any]:
    """The record columns of a wall-clock timing (``cron``, ``rrule``): its zone, DST choices
    and reason, and no elapsed-time or one-off columns."""
    return {
        "time_zone": zone,
        "skipped_time": skipped.value,
        "repeated_time": repeated.value,
        "zone_reason": reason,
        "interval": None,
        "anchor": None,
        "run_at": None,
        "delay": None,
    }


def no_rule_fields() -> dict[str, Any]:
    """The calendar-rule columns of a timing that is not an ``rrule``: a schedule changed
    from one timing to another keeps no rule behind."""
    return {"rrule": "", "calendar": {}, "on_excluded": "skip"}


def one_off_fields() -> dict[str, Any]:
    """The record columns of a one-off timing (``at``, ``after``) before its own: UTC, no
    rule, no interval, no instant yet."""
    return {
        **no_rule_fields(),
        "cron": "",
        "time_zone": "UTC",
        "skipped_time": SkippedTime.SHIFT.value,
        "repeated_time": RepeatedTime.FIRST.value,
        "zone_reason": "",
        "interval": None,
        "anchor": None,
        "run_at": None,
        "delay": None,
    }
