"""Where django_jobs gets "now" from.

Every lease, retry and planning decision takes its instant from a `Clock` passed in by the
caller, never from PostgreSQL's `now()` (frozen for the length of a transaction) and never from
machine-local time. The production clock is the host's UTC clock corrected by an offset measured
against the database server (see docs/architecture.md, "Clocks and skew").

Interfaces (the admin, the ``jobs`` command, system checks) and ``runworker`` take their clock
from one place, :func:`current`: the process's `SystemClock`, unless a test (or a project)
injects another with :func:`use_clock`. Instants an interface hands to a service come from
``services.now()``, which aligns that clock with the database first, as every worker aligns its
own: an operator's ``run-now``, ``disable`` or ``health`` then means the instant the workers
mean, on a web or bastion host whose clock is off.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Something that tells the current instant as an aware UTC datetime."""

    def now(self) -> datetime: ...


class SystemClock:
    """The host's UTC clock, optionally corrected by an offset measured against the database.

    Replicas share one timeline only if their clocks agree. Workers and ``services.now()``
    call `align()` with the store's reading of the database clock (tests may `set_offset()`),
    so lease expiries written by one replica mean the same instant to every other.
    """

    def __init__(self, offset: timedelta = timedelta(0)) -> None:
        self._offset = offset
        self._lock = threading.Lock()
        self._aligned_at: float | None = None  # time.monotonic() of the last set_offset()

    @property
    def offset(self) -> timedelta:
        return self._offset

    def set_offset(self, offset: timedelta) -> None:
        with self._lock:
            self._offset = offset
            self._aligned_at = time.monotonic()

    def aligned_within(self, age: timedelta) -> bool:
        """Whether an offset was set less than ``age`` ago (a duration: the monotonic clock)."""
        aligned_at = self._aligned_at
        return aligned_at is not None and time.monotonic() - aligned_at < age.total_seconds()

    def align(self, read_database: Callable[[], datetime], *, samples: int = 3) -> timedelta:
        """Set the offset to the database clock's (``read_database``, one round trip each)
        and return the round trip of the sample kept: the offset's error is at most half of it.

        Keeps the sample with the shortest round trip, as NTP does, and assumes the database
        read its clock half way through it.
        """
        best: tuple[timedelta, timedelta] | None = None
        for _ in range(samples):
            before = datetime.now(UTC)
            db_now = ensure_aware_utc(read_database(), name="database clock")
            after = datetime.now(UTC)
            if best is None or after - before < best[0]:
                best = (after - before, db_now - (before + (after - before) / 2))
        assert best is not None, "align() needs at least one sample"
        round_trip, offset = best
        self.set_offset(offset)
        return round_trip

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset


_lock = threading.Lock()
# Clocks injected by use_clock(), innermost last. Process-wide, not per thread: a test's
# live server thread must serve admin pages on the clock the test injected.
_injected: list[Clock] = []
_process_clock = SystemClock()


def current() -> Clock:
    """The clock of this process's interfaces and of ``runworker``: the innermost clock given
    to :func:`use_clock`, else the process's one `SystemClock` (aligned with the database by
    ``services.now()`` and by the worker; see the module docstring)."""
    with _lock:
        return _injected[-1] if _injected else _process_clock


@contextmanager
def use_clock(clock: Clock) -> Iterator[Clock]:
    """Make ``clock`` what :func:`current` returns, in every thread, until the block ends.

    For tests (``django_jobs.testing.use_clock`` is this function): an admin page, a ``jobs``
    subcommand or a system check run inside the block reads ``clock``. Blocks nest.
    """
    if not isinstance(clock, Clock):
        raise TypeError(f"use_clock() needs an object with now(), got {clock!r}")
    with _lock:
        _injected.append(clock)
    try:
        yield clock
    finally:
        with _lock:
            _injected.remove(clock)


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
