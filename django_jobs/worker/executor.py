"""Running one claimed occurrence in its own execution scope, and writing its outcome.

The scope: the thread's database connection is checked before the handler runs; after it, a
connection the handler used is reset (``DISCARD ALL``) so no session state crosses runs; the
logging context is bound to the schedule, occurrence, attempt, tenant and fencing token
(``log_scope``) and restored after. The handler runs in a copy of that context
(``invoke.call_handler``): what it binds is gone before any outcome is logged, and the lines
about the run carry the worker's values of those keys. Every outcome write is fenced by the
run's token.

A store outage is not the job's failure: a handler that raised because the store could not be
reached, and a run whose lease could not be confirmed, give the occurrence back with an
``outage`` attempt once the store answers, and the failure count stays as it was.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connection, connections
from psycopg.sql import SQL, Literal

from .. import store
from ..clock import LATEST, Clock, later
from ..conf import JobsSettings
from ..exceptions import Cancelled, JobsError, LeaseLost, PermanentFailure, UnknownJob
from ..logging import run_scope
from ..models import AttemptOutcome
from ..registry import Registry
from ..safe_error import SafeError, loggable
from ..store import Lease
from .inflight import ActiveRun, CancelReason
from .invoke import call_handler
from .outage import STORE_OUTAGE, Backoff, OutageLog, is_store_outage
from .retry import backoff_delay
from .run import Run

log = structlog.get_logger("django_jobs.worker")


class Outcome(enum.StrEnum):
    COMPLETED = "completed"
    RETRY = "retry"
    DEAD = "dead"
    LEASE_LOST = "lease_lost"
    RELEASED = "released"
    TIMED_OUT = "timed_out"
    OUTAGE = "outage"  # the store was out of reach: given back, no failure counted
    UNWRITTEN = "unwritten"  # the worker stopped before the store took the outcome
    HANDED_OVER = "handed_over"  # the completion is written by the completer (group commit)


@dataclass(frozen=True)
class Execution:
    clock: Clock
    settings: JobsSettings
    registry: Registry
    stop_writing: threading.Event = field(default_factory=threading.Event)
    # Where a run that needs only its completion recorded is handed (the worker's completer,
    # which writes many in one fenced statement); ``None``: the run thread writes it itself.
    hand_over: Callable[[ActiveRun], None] | None = None
    outage: OutageLog | None = None  # the replica's rate-limited outage log


def log_scope(active: ActiveRun) -> AbstractContextManager[None]:
    """The logging context of the lines about ``active``: its reserved keys bound (the
    worker's values, never a handler's), restored on exit."""
    lease = active.lease
    return run_scope(
        schedule=str(active.schedule),
        occurrence=str(lease.occurrence_id),
        attempt=lease.attempt,
        tenant=lease.tenant,
        token=lease.token,
    )


def release_unstarted(active: ActiveRun, ctx: Execution) -> Outcome:
    """Give back a run claimed ahead that was cancelled (shutdown) before it started."""

    def write(lease: Lease, now: datetime) -> bool:
        return _release(lease, now, AttemptOutcome.UNSTARTED)

    with log_scope(active):
        return _write(active, ctx, write, Outcome.RELEASED)


def execute(active: ActiveRun, ctx: Execution) -> Outcome:
    """Run ``active``'s handler in its own scope and record what happened."""
    # Inline runs (tests) execute inside the caller's transaction: leave that connection be.
    outer_transaction = connection.in_atomic_block
    if not outer_transaction:
        _keep_or_close_connection()
    session = _SessionUse()
    try:
        with log_scope(active):
            return _run_handler(active, ctx, session)
    finally:
        if not outer_transaction:
            _keep_or_close_connection()
            if session.used:
                _reset_session()


class _SessionUse:
    """An execute wrapper on the store's connection: whether the handler sent anything on it
    (its session then needs a reset), and whether a statement failed because the connection
    broke (terminated, reset, the server gone): that is the store's outage, not the job's."""

    used = False
    broke = False

    def __call__(self, execute: Callable[..., Any], *args: Any) -> Any:
        self.used = True
        try:
            return execute(*args)
        except Exception as exc:
            self.broke = self.broke or is_store_outage(exc)
            raise


def _keep_or_close_connection() -> None:
    """Check this run thread's connection between runs: closed if a run left it broken (an
    error made it unusable, or autocommit was left off), kept for the next run otherwise.

    Run threads belong to the worker, so ``CONN_MAX_AGE`` (a setting for request handling,
    which defaults to closing after every request) does not apply to them: reconnecting for
    every run cost a connection and a ``set_config`` per occurrence.
    """
    connection.close_at = None
    connection.close_if_unusable_or_obsolete()


# What ``DISCARD ALL`` does, statement by statement: ``DISCARD ALL`` itself cannot share a
# round trip with the session setup that must follow it (it refuses to run in the implicit
# transaction of a multi-statement query); these can.
_DISCARD = (
    "CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; DEALLOCATE ALL; UNLISTEN *; "
    "SELECT pg_advisory_unlock_all(); DISCARD PLANS; DISCARD TEMP; DISCARD SEQUENCES"
)


def _reset_session() -> None:
    """Give the next run a clean session: drop what a handler left on the connection
    (settings, role, temporary tables, prepared statements, cursors, advisory locks, LISTEN
    registrations), then apply Django's own session setup again (time zone, role), in one
    round trip. A connection that cannot be reset is closed: the next run opens a fresh one."""
    if connection.connection is None:
        return
    statements = [SQL(_DISCARD), SQL("SET TIME ZONE {}").format(Literal(connection.timezone_name))]
    if role := connection.settings_dict["OPTIONS"].get("assume_role"):
        statements.append(SQL("SET ROLE {}").format(Literal(role)))
    try:
        with connection.cursor() as cursor:
            cursor.execute(SQL("; ").join(statements).as_string(connection.connection))
    except Exception:  # any failure here: the next run starts on a fresh connection
        connection.close()


def _drop_leaked_transaction() -> bool:
    """If the handler returned inside a transaction it opened, roll it back and give this
    thread a fresh connection, so the outcome write does not join (and die with) it."""
    if not connection.in_atomic_block:
        return False
    connection.close()  # the server rolls the open transaction back
    del connections[DEFAULT_DB_ALIAS]  # the wrapper's atomic state is beyond repair
    return True


def _run_handler(active: ActiveRun, ctx: Execution, session: _SessionUse) -> Outcome:
    lease, schedule = active.lease, active.schedule
    run = Run(lease, clock=ctx.clock, deadline=active.deadline, cancel=active.cancel)
    outer_transaction = connection.in_atomic_block
    try:
        handler = ctx.registry.get(schedule.job)
    except UnknownJob as exc:  # a bad schedule is reported and left alone, never retried
        return _dead(active, exc, ctx)
    connection.errors_occurred = False  # checked just before: what follows is this run's
    try:
        with connection.execute_wrapper(session):
            call_handler(handler.func, run, name=handler.name)
        if not outer_transaction and _drop_leaked_transaction():
            raise JobsError(
                f"job {schedule.job!r} returned with a database transaction still open; its "
                "writes were rolled back. Close every transaction the handler opens."
            )
    except LeaseLost:
        return _lost(active, ctx)
    except PermanentFailure as exc:
        return _dead(active, exc, ctx)
    except Exception as exc:
        outage = is_store_outage(exc) and _store_unreachable(session)
        if not outer_transaction:
            _drop_leaked_transaction()
        return _failed(active, exc, ctx, outage=outage)
    if run.completed:
        log.info("occurrence.completed")
        return Outcome.COMPLETED
    if active.reason == CancelReason.LEASE_LOST or active.abandoned:
        return _lost(active, ctx)
    if ctx.hand_over is not None:
        ctx.hand_over(active)
        return Outcome.HANDED_OVER
    return _write(active, ctx, _complete, Outcome.COMPLETED)


def _lost(active: ActiveRun, ctx: Execution) -> Outcome:
    """Another holder has the occurrence. If the lease lapsed because the store could not be
    reached, the attempt is excused (recorded ``outage``, its failure given back)."""
    if active.reason == CancelReason.OUTAGE and not active.abandoned:
        return _excuse(active, ctx)
    log.warning("lease.lost", reason=active.reason)
    return Outcome.LEASE_LOST


def _failed(active: ActiveRun, exc: Exception, ctx: Execution, *, outage: bool) -> Outcome:
    """A handler error (``outage``: one the store being out of reach caused), or its reaction
    to being cancelled."""
    if active.abandoned or active.reason == CancelReason.LEASE_LOST:
        log.warning("lease.lost", error_type=type(exc).__name__)
        return Outcome.LEASE_LOST
    if active.reason == CancelReason.OUTAGE or outage:
        return give_back_after_outage(active, ctx, exc)
    if active.reason == CancelReason.SHUTDOWN and isinstance(exc, Cancelled):
        return _write(active, ctx, _release, Outcome.RELEASED)
    timed_out = active.reason == CancelReason.TIMEOUT
    return record_failure(
        active, exc, ctx, outcome=AttemptOutcome.TIMED_OUT if timed_out else AttemptOutcome.FAILED
    )


def _store_unreachable(session: _SessionUse) -> bool:
    """Whether the store's connection on this thread broke during the handler: a statement
    on it failed for that reason (even if Django has reconnected since, as ``run.atomic()``'s
    exit does), or an error went through it and it is gone or no longer answers (a connect
    that failed). An outage-looking error from another server the handler talks to (a second
    database, a partner's PostgreSQL) while the store answers is the job's own failure."""
    if session.broke:
        return True
    if not connection.errors_occurred:
        return False
    return connection.connection is None or not connection.is_usable()


def give_back_after_outage(
    active: ActiveRun, ctx: Execution, exc: BaseException | None = None, *, until: datetime = LATEST
) -> Outcome:
    """The run ended because the store could not be reached: once it answers, give the
    occurrence back (due again at once; the attempt recorded ``outage``, no failure counted),
    or, if another claim took it over meanwhile, excuse the attempt."""

    def write(lease: Lease, now: datetime) -> bool:
        return _release(lease, now, AttemptOutcome.OUTAGE)

    error_type = type(exc).__name__ if exc else None
    error = loggable(exc, patterns=ctx.settings.REDACT_PATTERNS, max_chars=200) if exc else None
    with log_scope(active):  # also called before the run started, and from the loop
        log.warning("occurrence.outage", error_type=error_type, error=error)
        connection.close_if_unusable_or_obsolete()  # the error may have broken this connection
        result = _write(active, ctx, write, Outcome.OUTAGE, until=until)
        if result == Outcome.LEASE_LOST:
            return _excuse(active, ctx, until=until)
        return result


def _excuse(active: ActiveRun, ctx: Execution, *, until: datetime = LATEST) -> Outcome:
    def write(lease: Lease, now: datetime) -> bool:
        store.excuse_outage(lease, now=now)
        return True

    log.warning("lease.lost", reason=CancelReason.OUTAGE)
    return _write(active, ctx, write, Outcome.OUTAGE, until=until)


def record_failure(
    active: ActiveRun,
    exc: BaseException,
    ctx: Execution,
    *,
    outcome: AttemptOutcome,
    until: datetime = LATEST,
) -> Outcome:
    """A failed (or timed-out) attempt: retried after backoff, or dead once the schedule's
    ``max_attempts`` have failed."""
    with log_scope(active):  # also called from the loop, for a run it cut off
        if active.lease.failures + 1 >= active.schedule.max_attempts:
            return _dead(active, exc, ctx, outcome=outcome, until=until)
        return _retry(active, exc, ctx, outcome=outcome, until=until)


def _safe(exc: BaseException, ctx: Execution) -> SafeError:
    return SafeError.from_exception(
        exc,
        max_chars=ctx.settings.ERROR_MESSAGE_MAX_CHARS,
        patterns=ctx.settings.REDACT_PATTERNS,
    )


def _dead(
    active: ActiveRun,
    exc: BaseException,
    ctx: Execution,
    *,
    outcome: AttemptOutcome = AttemptOutcome.FAILED,
    until: datetime = LATEST,
) -> Outcome:
    error = _safe(exc, ctx)

    def write(lease: Lease, now: datetime) -> bool:
        return store.dead_letter(lease, now=now, error=error, outcome=outcome)

    result = _write(active, ctx, write, Outcome.DEAD, until=until)
    if result == Outcome.DEAD:
        log.error("occurrence.dead", error_type=error.type, error=error.message, outcome=outcome)
    return result


def _retry(
    active: ActiveRun,
    exc: BaseException,
    ctx: Execution,
    *,
    outcome: AttemptOutcome,
    until: datetime = LATEST,
) -> Outcome:
    """Record a failed attempt and when the next one may start (no lease is held meanwhile)."""
    error = _safe(exc, ctx)
    schedule = active.schedule
    delay = backoff_delay(
        active.lease.failures + 1, base=schedule.backoff, cap=schedule.max_backoff
    )

    def write(lease: Lease, now: datetime) -> bool:
        return store.fail(lease, now=now, error=error, retry_at=later(now, delay), outcome=outcome)

    result = _write(active, ctx, write, Outcome.RETRY, until=until)
    if result == Outcome.RETRY:
        log.warning(
            "occurrence.failed",
            error_type=error.type,
            error=error.message,
            retry_in_s=round(delay.total_seconds(), 3),
            outcome=outcome.value,
        )
        store.notify("retry")
    return Outcome.TIMED_OUT if outcome == AttemptOutcome.TIMED_OUT else result


def _complete(lease: Lease, now: datetime) -> bool:
    accepted = bool(store.complete([lease], now=now).accepted)
    if accepted:
        log.info("occurrence.completed")
    return accepted


def _release(
    lease: Lease, now: datetime, outcome: AttemptOutcome = AttemptOutcome.RELEASED
) -> bool:
    released = bool(store.release([lease], now=now, outcome=outcome).accepted)
    if released:
        store.notify("release")
        log.info("occurrence.released", outcome=outcome.value)
    return released


def _write(
    active: ActiveRun,
    ctx: Execution,
    write: Callable[[Lease, datetime], bool],
    success: Outcome,
    *,
    until: datetime = LATEST,
) -> Outcome:
    """Write an outcome, fenced; through a store outage, keep trying until the store answers
    (or ``until``, or a forced stop). A write the fence refuses is a lost lease.

    The fence, not the lease's expiry, decides: an outcome written after the lease lapsed is
    accepted while no other claim has taken the occurrence.
    """
    backoff = Backoff(base=0.2, cap=5.0)
    while True:
        lease = active.lease  # the lease keeper may have renewed it
        try:
            if write(lease, ctx.clock.now()):
                return success
            log.warning("occurrence.fenced_out")
            return Outcome.LEASE_LOST
        except STORE_OUTAGE as exc:
            close_old_connections()
            if ctx.outage is not None:
                ctx.outage.failed(exc, during="outcome")
            if ctx.clock.now() >= until or ctx.stop_writing.is_set():
                log.error(
                    "outcome.unwritten",
                    outcome=success.value,
                    error=loggable(exc, patterns=ctx.settings.REDACT_PATTERNS, max_chars=200),
                )
                return Outcome.UNWRITTEN
            ctx.stop_writing.wait(backoff.next_delay())


__all__ = [
    "ActiveRun",
    "CancelReason",
    "Execution",
    "Outcome",
    "execute",
    "give_back_after_outage",
    "log_scope",
    "record_failure",
    "release_unstarted",
]
