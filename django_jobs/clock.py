"""Where django_jobs gets "now" from.

Every lease, retry and planning decision takes its instant from a `Clock` passed in by the
caller, never from PostgreSQL's `now()` (frozen for the length of a transaction) and never from
machine-local time. The production clock is the host's UTC clock corrected by an offset measured
against the database server (see docs/architecture.md, "Clocks and skew").
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Something that tells the current instant as an aware UTC datetime."""

    def now(self) -> datetime: ...


class SystemClock:
    """The host's UTC clock, optionally corrected by an offset measured against the database.

    Replicas share one timeline only if their clocks agree. Workers call `set_offset()` with the
    offset the store measured (`store.measure_clock_offset`), so lease expiries written by one
    replica mean the same instant to every other.
    """

    def __init__(self, offset: timedelta = timedelta(0)) -> None:
        self._offset = offset
        self._lock = threading.Lock()

    @property
    def offset(self) -> timedelta:
        return self._offset

    def set_offset(self, offset: timedelta) -> None:
        with self._lock:
            self._offset = offset

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset


def ensure_aware_utc(instant: datetime, *, name: str = "instant") -> datetime:
    """Return `instant` in UTC; refuse a naive datetime, whose meaning depends on the host."""
    if instant.tzinfo is None or instant.tzinfo.utcoffset(instant) is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {instant.isoformat()}")
    return instant.astimezone(UTC)


# The latest instant django_jobs computes: a year short of ``datetime.max``, so that adding a
# lease or a grace period to it cannot overflow.
LATEST = datetime(9998, 12, 31, tzinfo=UTC)


def later(instant: datetime, delta: timedelta) -> datetime:
    """``instant + delta``, or ``LATEST`` when that lies beyond it: an absurd duration read from
    a schedule row (a timeout or backoff of a million years) must not crash the worker."""
    try:
        return min(instant + delta, LATEST)
    except OverflowError:
        return LATEST
