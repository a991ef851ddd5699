"""A store outage: backed off, logged at a bounded rate, never counted as a job failure."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import structlog

from ..clock import Clock
from ..safe_error import loggable

log = structlog.get_logger("django_jobs.worker")


class Backoff:
    """Capped exponential delays with jitter: 0.5 s, 1 s, 2 s, ... up to ``cap``."""

    def __init__(self, *, base: float = 0.5, cap: float = 30.0) -> None:
        self.base, self.cap, self.failures = base, cap, 0

    def next_delay(self) -> float:
        self.failures += 1
        raw: float = min(self.cap, self.base * 2.0 ** min(self.failures - 1, 32))
        return raw * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.failures = 0


class OutageLog:
    """Logs the first error of an outage, then at most one summary per ``interval`` with the
    number of errors it suppressed, then one recovery event. An outage of any length writes
    ``2 + duration / interval`` lines."""

    def __init__(
        self,
        clock: Clock,
        *,
        interval: timedelta = timedelta(seconds=30),
        patterns: tuple[str, ...] = (),
    ) -> None:
        self.clock = clock
        self.patterns = patterns
        self.interval = interval
        self.since: datetime | None = None
        self._last_line: datetime | None = None
        self._suppressed = 0
        self.errors = 0

    @property
    def active(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> None:
        now = self.clock.now()
        self.errors += 1
        first_line = (loggable(exc, patterns=self.patterns, max_chars=10_000).splitlines() or [""])[
            0
        ]
        detail = f"{type(exc).__name__}: {first_line}"
        if self.since is None:
            self.since, self._last_line, self._suppressed = now, now, 0
            log.error("store.unavailable", error=detail[:300])
            return
        assert self._last_line is not None
        if now - self._last_line >= self.interval:
            log.error(
                "store.still_unavailable",
                since=self.since.isoformat(),
                suppressed=self._suppressed,
                error=detail[:300],
            )
            self._last_line, self._suppressed = now, 0
        else:
            self._suppressed += 1

    def recovered(self) -> None:
        if self.since is None:
            return
        now = self.clock.now()
        log.info(
            "store.recovered",
            down_for_s=round((now - self.since).total_seconds(), 1),
            errors=self.errors,
        )
        self.since, self._last_line, self._suppressed, self.errors = None, None, 0, 0
