"""A store outage: recognised, backed off, written through, logged at a bounded rate, never
counted as a job failure. The worker's one outage policy: the loop, the run threads (through
the executor), the completer and the lease keeper all take it from here.

- What is an outage: ``STORE_OUTAGE`` (the errors that may mean one), ``call_outage`` (an
  error of one of the worker's own store calls: those, or a server that cannot take writes),
  ``is_store_outage`` (a handler's error, looked at closely), ``pass_failure`` (a failed pass
  of the loop).
- After one: ``drop_connection`` closes the thread's connection, so the next connect chooses
  its server again (a multi-host ``DATABASE_URL`` with ``target_session_attrs=read-write``
  finds the new primary after a failover).
- How often the store is tried again: ``Backoff``, with ``pass_backoff`` for the loop and
  ``write_backoff`` for outcome writes.
- Writing through an outage: ``keep_writing`` retries a fenced write until the store answers,
  a deadline, or a forced stop; ``loop_write_deadline`` is the deadline of the loop's writes.
- Saying so: ``OutageLog``, a bounded number of lines however long the outage lasts.
- The loop's part: ``LoopOutage`` waits out an outage at start-up and after a failed pass.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import psycopg
import structlog
from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
)

from ..clock import LATEST, Clock
from ..safe_error import loggable
from .retry import backoff_seconds

if TYPE_CHECKING:
    from ..store import Lease
    from .wakeup import Wakeup

log = structlog.get_logger("django_jobs.worker")

T = TypeVar("T")

# Errors that may mean "the database cannot be reached", not "the job failed". A server that
# answers but cannot take writes raises an ``InternalError`` (SQLSTATE 25006) instead: a
# worker's own store call catches ``DatabaseError`` and asks ``call_outage``.
STORE_OUTAGE = (OperationalError, InterfaceError)

# How a lost store is tried again: 0.5 s, 1 s, 2 s ... at most 5 s apart for the loop's passes
# (and its start-up), so a worker is back within seconds of the store without a fleet of
# replicas hammering a server that is coming back. An outcome write starts sooner, at 0.2 s:
# the run's slot and lease wait on it.
PASS_RETRY_BASE_SECONDS = 0.5
WRITE_RETRY_BASE_SECONDS = 0.2
RETRY_CAP_SECONDS = 5.0


class OutageEvents(NamedTuple):
    """The names of the three lines an ``OutageLog`` writes."""

    first: str  # the first error of a spell
    again: str  # a summary of the errors since, at most one per interval
    recovered: str  # the spell is over


STORE_EVENTS = OutageEvents("store.unavailable", "store.still_unavailable", "store.recovered")
# The loop's failed passes that are not an outage (a constraint, a bad row): logged at the
# same bounded rate as an outage, under names of their own.
PASS_ERROR_EVENTS = OutageEvents(
    "worker.pass_failed", "worker.pass_still_failing", "worker.pass_recovered"
)
# One summary line per 30 s: an outage of any length writes 2 + minutes x 2 lines.
SUMMARY_INTERVAL = timedelta(seconds=30)
# One outage reaches each of the replica's connections in turn, each finding out on its next
# use: an error this soon after a recovery is the same outage reaching another connection.
ECHO_QUIET = timedelta(seconds=10)
# The error on a line: its first line, cut to this many characters, so a spell's lines stay
# short whatever the driver's message holds.
DETAIL_CHARS = 300

# A server that answers but cannot take writes: a demoted primary, a standby, a server set
# ``default_transaction_read_only`` (as failover managers do to the old primary). Django raises
# it as ``InternalError``; its connection looks healthy (``SELECT 1`` works), so it must be
# closed for the next connect to look for the primary.
READ_ONLY = "25006"
# SQLSTATEs of a store that cannot be reached or cannot take writes: class 08 (connection
# exception), the server shutting down or starting (57P01-57P03), a read-only server after a
# failover, and no connection slot left (53300).
_OUTAGE_STATES = ("08", "57P01", "57P02", "57P03", READ_ONLY, "53300")


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc, "sqlstate", None) or getattr(exc.__cause__, "sqlstate", None)


def call_outage(exc: DatabaseError) -> bool:
    """Whether ``exc``, raised by one of the worker's own store calls (a claim, a renewal, an
    outcome write, the heartbeat), is an outage: the store out of reach (``STORE_OUTAGE``) or
    a server that cannot take writes (``READ_ONLY``, or any state of ``is_store_outage``)."""
    if isinstance(exc, STORE_OUTAGE):
        return True
    state = _sqlstate(exc)
    return state is not None and state.startswith(_OUTAGE_STATES)


def raise_unless_outage(exc: DatabaseError) -> None:
    """Re-raise ``exc`` (caught as a ``DatabaseError`` around a store call) unless it is an
    outage (``call_outage``)."""
    if not call_outage(exc):
        raise exc


class OutageCount:
    """How many times a thread of this process dropped its connection for an outage. A run
    thread whose idle connection was opened before the latest one closes it before its next
    run (``session.keep_or_close_connection``): after a failover it may lead to a dead server
    or to one that no longer takes writes, and the handler would find out halfway through."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def advance(self) -> None:
        with self._lock:
            self.value += 1


OUTAGES = OutageCount()


def drop_connection() -> None:
    """After an outage: close this thread's store connection, whatever state it seems in, and
    the other aliases' broken ones; count it (``OUTAGES``), so the run threads drop theirs
    too. A read-only server answers Django's health check, so Django would keep the connection
    and every later write would fail the same way; a fresh connect runs libpq's host selection
    again (``target_session_attrs=read-write``)."""
    OUTAGES.advance()
    connection.close()
    close_old_connections()


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


def _serialization_conflict(exc: BaseException) -> bool:
    """SQLSTATE class 40 (deadlock detected, serialization failure): an OperationalError to
    the driver, but the database answered; the statement can simply run again."""
    sqlstate = getattr(exc.__cause__, "sqlstate", None) or ""
    return sqlstate.startswith("40")


class PassFailure(enum.Enum):
    """What a database error that ended one of the loop's passes means."""

    CONFLICT = "conflict"  # a deadlock victim or serialization failure: the store is up
    OUTAGE = "outage"  # the store is out of reach: back off; the LISTEN connection is gone
    ERROR = "error"  # not an outage (a constraint, a bad row): back off, log at a bounded rate


def pass_failure(exc: DatabaseError) -> PassFailure:
    """Classify the database error that ended a pass (see ``PassFailure``)."""
    if not call_outage(exc):
        return PassFailure.ERROR
    if isinstance(exc, OperationalError) and _serialization_conflict(exc):
        return PassFailure.CONFLICT
    return PassFailure.OUTAGE


class Backoff:
    """Capped exponential delays with jitter: ``base``, twice that, ... up to ``cap`` (the
    formula of ``retry.backoff_seconds``), counted from the last ``reset``."""

    def __init__(self, *, base: float = 0.5, cap: float = 30.0) -> None:
        self.base, self.cap, self.failures = base, cap, 0

    def next_delay(self) -> float:
        self.failures += 1
        return backoff_seconds(self.failures, base=self.base, cap=self.cap)

    def reset(self) -> None:
        self.failures = 0


def pass_backoff() -> Backoff:
    """The delays between the loop's tries of a store it cannot reach."""
    return Backoff(base=PASS_RETRY_BASE_SECONDS, cap=RETRY_CAP_SECONDS)


def write_backoff() -> Backoff:
    """The delays between tries of one outcome write through an outage."""
    return Backoff(base=WRITE_RETRY_BASE_SECONDS, cap=RETRY_CAP_SECONDS)


@dataclass(frozen=True)
class Unwritten:
    """A write given up on: the store was still out of reach at the deadline or a forced stop."""

    error: BaseException


def keep_writing(
    write: Callable[[], T],
    *,
    clock: Clock,
    stop: threading.Event,
    outage: OutageLog | None,
    during: str,
    until: datetime = LATEST,
) -> T | Unwritten:
    """Run ``write`` until the store takes it; return what it returned, or ``Unwritten``.

    The fence, not the lease's expiry, decides whether a write still counts: an outcome
    written after the lease lapsed is accepted while no other claim has taken the occurrence,
    so by default this keeps trying for as long as the outage lasts. Steps:
    1. call ``write`` (it reads the lease afresh: the keeper may have renewed it);
    2. on a store outage (``call_outage``), drop the connection (``drop_connection``) and
       log it at a bounded rate (``during`` says which write); give up if ``until`` has
       passed or ``stop`` is set (a forced stop);
    3. else wait (``write_backoff``; a forced stop ends the wait) and go to 1.
    """
    backoff = write_backoff()
    while True:
        try:
            return write()
        except DatabaseError as exc:
            raise_unless_outage(exc)
            drop_connection()
            if outage is not None:
                outage.failed(exc, during=during)
            if clock.now() >= until or stop.is_set():
                return Unwritten(exc)
            stop.wait(backoff.next_delay())


def loop_write_deadline(lease: Lease) -> datetime:
    """How long the loop itself keeps writing an outcome through an outage (for a run it cut
    off): until the lease expires. The loop must go on claiming, renewing and shutting down,
    so it never waits out a long outage; a run thread or the completer does."""
    return lease.expires_at


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
        interval: timedelta = SUMMARY_INTERVAL,
        quiet: timedelta = ECHO_QUIET,
        patterns: tuple[str, ...] = (),
        events: tuple[str, str, str] = STORE_EVENTS,
    ) -> None:
        self.clock = clock
        self.patterns = patterns
        self.interval = interval
        self.quiet = quiet
        self.events = OutageEvents(*events)
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
        now = self.clock.now()
        text = loggable(exc, patterns=self.patterns, max_chars=10_000)  # then its first line
        detail = f"{type(exc).__name__}: {(text.splitlines() or [''])[0]}"[:DETAIL_CHARS]
        with self._lock:
            self.errors += 1
            if self.since is None:
                self.since, self._last_line, self._suppressed = now, now, 0
                self._echo = (
                    self._recovered_at is not None and now - self._recovered_at < self.quiet
                )
                if not self._echo:
                    log.error(self.events.first, error=detail, **context)
                return
            assert self._last_line is not None
            if now - self._last_line < self.interval:
                self._suppressed += 1
                return
            since, suppressed = self.since, self._suppressed
            self._last_line, self._suppressed = now, 0
        log.error(
            self.events.again,
            since=since.isoformat(),
            suppressed=suppressed,
            error=detail,
            **context,
        )

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
        log.info(self.events.recovered, down_for_s=down_for, errors=errors)


class LoopOutage:
    """What the loop does when the store fails it: log at a bounded rate (an outage in
    ``outage``, other database errors in ``pass_errors``), back off (``pass_backoff``), and
    go on; a worker never dies of a bad pass, nor exits for an outage."""

    def __init__(self, clock: Clock, *, patterns: tuple[str, ...], wakeup: Wakeup) -> None:
        self.patterns, self.wakeup = patterns, wakeup
        self.outage = OutageLog(clock, patterns=patterns)
        self.pass_errors = OutageLog(clock, patterns=patterns, events=PASS_ERROR_EVENTS)
        self.backoff = pass_backoff()

    def wait_for_store(self, action: Callable[[], object], stopping: threading.Event) -> bool:
        """Run ``action`` until it gets through a store outage; False if ``stopping`` was set
        first."""
        while not stopping.is_set():
            try:
                action()
            except DatabaseError as exc:
                raise_unless_outage(exc)
                self.outage.failed(exc)
                drop_connection()
                self.wakeup.wait(self.backoff.next_delay())
                continue
            self.outage.recovered()
            self.backoff.reset()
            return True
        return False

    def pass_failed(self, exc: DatabaseError) -> None:
        """A pass ended with a database error: go again at once after a conflict, else after
        a backoff (``pass_failure``)."""
        failure = pass_failure(exc)
        if failure is PassFailure.CONFLICT:
            error = loggable(exc, patterns=self.patterns)
            log.warning("worker.pass_conflict", error=error)
            close_old_connections()
            return
        (self.outage if failure is PassFailure.OUTAGE else self.pass_errors).failed(exc)
        if failure is PassFailure.OUTAGE:
            drop_connection()
            self.wakeup.close()  # its LISTEN connection is gone too: reopened at the next wait
        else:
            close_old_connections()
        self.wakeup.wait(self.backoff.next_delay())

    def pass_succeeded(self) -> None:
        """A pass went through: end an outage, or a spell of failed passes."""
        if self.outage.active or self.pass_errors.active:
            self.outage.recovered()
            self.pass_errors.recovered()
            self.backoff.reset()
