"""Helpers for the tests of projects that use django_jobs (and for django_jobs' own).

``FakeClock`` stands still until the test moves it; ``use_clock(fake)`` makes the admin, the
``jobs`` command, the system checks and ``runworker`` read it (``django_jobs.clock.use_clock``);
``run_due`` runs what is due inline.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from .clock import Clock, ensure_aware_utc, use_clock

__all__ = ["FakeClock", "run_due", "use_clock"]

if TYPE_CHECKING:
    from .registry import Registry
    from .worker.loop import PassSummary


class FakeClock:
    """A clock that stands still until a test sets or advances it.

    Unlike freezegun it keeps ``fold`` and zone information intact, so it is the clock to use
    for anything zone-aware (DST transitions).
    """

    def __init__(self, start: datetime) -> None:
        self._now = ensure_aware_utc(start, name="start")
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, instant: datetime) -> None:
        with self._lock:
            self._now = ensure_aware_utc(instant, name="instant")

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now = self._now + delta
            return self._now


def run_due(clock: Clock, *, jobs: Registry | None = None, replica_id: str = "test") -> PassSummary:
    """Plan and run everything due at ``clock.now()``, inline, in the caller's transaction.

    For a project's own tests: advance a ``FakeClock``, call ``run_due(clock)``, and assert on
    what the handlers did. Uses the real store, fencing and policies.
    """
    from .registry import registry
    from .worker.loop import Worker

    worker = Worker(
        replica_id=replica_id, clock=clock, jobs=jobs or registry, listen=False, inline=True
    )
    try:
        return worker.run_pass()
    finally:
        worker.close()
