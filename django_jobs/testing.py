"""Helpers for the tests of projects that use django_jobs (and for django_jobs' own)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from .clock import ensure_aware_utc


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
