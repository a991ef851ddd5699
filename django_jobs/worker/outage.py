"""A store outage: recognised, backed off, logged at a bounded rate, never counted as a job
failure."""

from __future__ import annotations

import random
import threading
from datetime import datetime, timedelta

import psycopg
import structlog
from django.db import DatabaseError, InterfaceError, OperationalError

from ..clock import Clock
from ..safe_error import loggable

log = structlog.get_logger("django_jobs.worker")

# Errors that may mean "the database cannot be reached", not "the job failed".
STORE_OUTAGE = (OperationalError, InterfaceError)

# SQLSTATEs of a store that cannot be reached or cannot take writes: class 08 (connection
# exception), the server shutting down or starting (57P01-57P03), a read-only server after a
# failover (25006), and no connection slot left (53300).
_OUTAGE_STATES = ("08", "57P01", "57P02", "57P03", "25006", "53300")


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc, "sqlstate", None) or getattr(exc.__cause__, "sqlstate", None)


def is_store_outage(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it was raised from or during, is the store being out of
    reach: a connection refused, terminated, timed out or closed, or a read-only server.

    Other database errors (a constraint, a deadlock, a cancelled statement, bad SQL) and every
    error that is not the driver's are the job's own.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _is_outage_error(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def _is_outage_error(exc: BaseException) -> bool:
    if isinstance(exc, InterfaceError | psycopg.InterfaceError):
        return True  # the connection is closed
    if not isinstance(exc, DatabaseError | psycopg.Error):
        return False
    state = _sqlstate(exc)
    if state is None:
        # The server never answered (refused, reset, timed out).
        return isinstance(exc, OperationalError | psycopg.OperationalError)
    return state.startswith(_OUTAGE_STATES)


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
    """Logs the first error of a spell, then at most one summary per ``interval`` with the
    number of errors it suppressed, then one recovery event. A spell of any length writes
    ``2 + duration / interval`` lines. Shared by the loop, the lease keeper, the completer and
    the run threads (thread-safe).

    ``events`` names the three lines: a store outage by default; the worker's failed passes
    (database errors that are not an outage) use their own.

    One outage reaches each of the replica's connections in turn (the loop's, then a run
    thread's, the keeper's at its next renewal), each finding out on its next use. An error
    within ``quiet`` of a recovery continues the spell that just ended instead of opening a
    new one: it is counted, not logged, and its own recovery is not announced again.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        interval: timedelta = timedelta(seconds=30),
        quiet: timedelta = timedelta(seconds=10),
        patterns: tuple[str, ...] = (),
        events: tuple[str, str, str] = (
            "store.unavailable",
            "store.still_unavailable",
            "store.recovered",
        ),
    ) -> None:
        self.clock = clock
        self.patterns = patterns
        self.interval = interval
        self.quiet = quiet
        self.events = events
        self.since: datetime | None = None
        self._last_line: datetime | None = None
        self._suppressed = 0
        self.errors = 0
        self._recovered_at: datetime | None = None
        self._echo = False  # a spell reopened within ``quiet``: its recovery is not announced
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException, **context: object) -> None:
        first, again, _ = self.events
        now = self.clock.now()
        text = loggable(exc, patterns=self.patterns, max_chars=10_000)
        detail = f"{type(exc).__name__}: {(text.splitlines() or [''])[0]}"[:300]
        with self._lock:
            self.errors += 1
            if self.since is None:
                self.since, self._last_line, self._suppressed = now, now, 0
                self._echo = (
                    self._recovered_at is not None and now - self._recovered_at < self.quiet
                )
                if not self._echo:
                    log.error(first, error=detail, **context)
                return
            assert self._last_line is not None
            if now - self._last_line < self.interval:
                self._suppressed += 1
                return
            since, suppressed = self.since, self._suppressed
            self._last_line, self._suppressed = now, 0
        log.error(again, since=since.isoformat(), suppressed=suppressed, error=detail, **context)

    def recovered(self) -> None:
        with self._lock:
            if self.since is None:
                return
            since, errors, echo = self.since, self.errors, self._echo
            self.since, self._last_line, self._suppressed, self.errors = None, None, 0, 0
            now = self.clock.now()
            self._recovered_at, self._echo = now, False
            if echo and now - since < self.interval:
                return
        down_for = round((now - since).total_seconds(), 1)
        log.info(self.events[2], down_for_s=down_for, errors=errors)
