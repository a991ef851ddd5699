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
