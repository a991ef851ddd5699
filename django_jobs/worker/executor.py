"""Running one claimed occurrence in its own execution scope, and writing its outcome.

The scope: the thread's database connection is checked before the handler runs and closed or
reset after; the logging context is bound to the schedule, occurrence, attempt, tenant and
fencing token and cleared after. Every outcome write is fenced by the run's token.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import structlog
from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    connections,
)

from .. import store
from ..clock import Clock, later
from ..conf import JobsSettings
from ..exceptions import Cancelled, JobsError, LeaseLost, PermanentFailure, UnknownJob
from ..models import AttemptOutcome, Schedule
from ..registry import Registry
from ..safe_error import SafeError, loggable
from ..store import Lease
from .outage import Backoff
from .retry import backoff_delay
from .run import Run

log = structlog.get_logger("django_jobs.worker")

# Errors that mean "the database cannot be reached", not "the job failed".
STORE_OUTAGE = (OperationalError, InterfaceError)


class Outcome(enum.StrEnum):
    COMPLETED = "completed"
    RETRY = "retry"
    DEAD = "dead"
    LEASE_LOST = "lease_lost"
    RELEASED = "released"
    TIMED_OUT = "timed_out"
    UNWRITTEN = "unwritten"  # the store stayed out until the lease expired
    HANDED_OVER = "handed_over"  # the completion is written by the completer (group commit)


class CancelReason(enum.StrEnum):
    TIMEOUT = "timeout"
    LEASE_LOST = "lease_lost"
    SHUTDOWN = "shutdown"


@dataclass
class ActiveRun:
    """A run in progress on this replica, shared by its thread, the lease keeper and the loop."""

    lease: Lease
    schedule: Schedule
    deadline: datetime
    cancel: threading.Event = field(default_factory=threading.Event)
    reason: CancelReason | None = None
    abandoned: bool = False  # cut off by the loop: the thread's late writes are skipped
    # Claimed ahead and waiting for a free run thread: its timeout starts when it starts.
    started: bool = False

    def cancel_for(self, reason: CancelReason) -> None:
        if self.reason is None:
            self.reason = reason
        self.cancel.set()


@dataclass(frozen=True)
class Execution:
    clock: Clock
    settings: JobsSettings
    registry: Registry
    stop_writing: threading.Event = field(default_factory=threading.Event)
    # Where a run that needs only its completion recorded is handed (the worker's completer,
    # which writes many in one fenced statement); ``None``: the run thread writes it itself.
    hand_over: Callable[[ActiveRun], None] | None = None


def release_unstarted(active: ActiveRun, ctx: Execution) -> Outcome:
    """Give back a run claimed ahead that was cancelled (shutdown) before it started."""
    return _write(active, ctx, _release, Outcome.RELEASED)


def execute(active: ActiveRun, ctx: Execution) -> Outcome:
    """Run ``active``'s handler in its own scope and record what happened."""
    lease, schedule = active.lease, active.schedule
    # Inline runs (tests) execute inside the caller's transaction: leave that connection be.
    outer_transaction = connection.in_atomic_block
    if not outer_transaction:
        _keep_or_close_connection()
    structlog.contextvars.bind_contextvars(
        schedule=str(schedule),
        occurrence=str(lease.occurrence_id),
        attempt=lease.attempt,
        tenant=lease.tenant,
        token=lease.token,
    )
    try:
        return _run_handler(active, ctx)
    finally:
        structlog.contextvars.clear_contextvars()
        if not outer_transaction:
            _keep_or_close_connection()


def _keep_or_close_connection() -> None:
    """Check this run thread's connection between runs: closed if a run left it broken (an
    error made it unusable, or autocommit was left off), kept for the next run otherwise.

    Run threads belong to the worker, so ``CONN_MAX_AGE`` (a setting for request handling,
    which defaults to closing after every request) does not apply to them: reconnecting for
    every run cost a connection and a ``set_config`` per occurrence.
    """
    connection.close_at = None
    connection.close_if_unusable_or_obsolete()


def _drop_leaked_transaction() -> bool:
    """If the handler returned inside a transaction it opened, roll it back and give this
    thread a fresh connection, so the outcome write does not join (and die with) it."""
    if not connection.in_atomic_block:
        return False
    connection.close()  # the server rolls the open transaction back
    del connections[DEFAULT_DB_ALIAS]  # the wrapper's atomic state is beyond repair
    return True


def _run_handler(active: ActiveRun, ctx: Execution) -> Outcome:
    lease, schedule = active.lease, active.schedule
    run = Run(lease, clock=ctx.clock, deadline=active.deadline, cancel=active.cancel)
    outer_transaction = connection.in_atomic_block
    try:
        handler = ctx.registry.get(schedule.job)
    except UnknownJob as exc:  # a bad schedule is reported and left alone, never retried
        return _dead(active, exc, ctx)
    try:
        handler.func(run)
        if not outer_transaction and _drop_leaked_transaction():
            raise JobsError(
                f"job {schedule.job!r} returned with a database transaction still open; its "
                "writes were rolled back. Close every transaction the handler opens."
            )
    except LeaseLost:
        log.warning("lease.lost")
        return Outcome.LEASE_LOST
    except PermanentFailure as exc:
        return _dead(active, exc, ctx)
    except Exception as exc:
        if not outer_transaction:
            _drop_leaked_transaction()
        return _failed(active, exc, ctx)
    if run.completed:
        log.info("occurrence.completed")
        return Outcome.COMPLETED
    if active.reason == CancelReason.LEASE_LOST or active.abandoned:
        log.warning("lease.lost")
        return Outcome.LEASE_LOST
    if ctx.hand_over is not None:
        ctx.hand_over(active)
        return Outcome.HANDED_OVER
    return _write(active, ctx, _complete, Outcome.COMPLETED)


def _failed(active: ActiveRun, exc: Exception, ctx: Execution) -> Outcome:
    """A handler error, or its reaction to being cancelled."""
    if active.abandoned or active.reason == CancelReason.LEASE_LOST:
        log.warning("lease.lost", error_type=type(exc).__name__)
        return Outcome.LEASE_LOST
    if active.reason == CancelReason.SHUTDOWN and isinstance(exc, Cancelled):
        return _write(active, ctx, _release, Outcome.RELEASED)
    timed_out = active.reason == CancelReason.TIMEOUT
    return record_failure(
        active, exc, ctx, outcome=AttemptOutcome.TIMED_OUT if timed_out else AttemptOutcome.FAILED
    )


def record_failure(
    active: ActiveRun, exc: BaseException, ctx: Execution, *, outcome: AttemptOutcome
) -> Outcome:
    """A failed (or timed-out) attempt: retried after backoff, or dead once the schedule's
    ``max_attempts`` have failed."""
    if active.lease.failures + 1 >= active.schedule.max_attempts:
        return _dead(active, exc, ctx, outcome=outcome)
    return _retry(active, exc, ctx, outcome=outcome)


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
) -> Outcome:
    error = _safe(exc, ctx)

    def write(lease: Lease, now: datetime) -> bool:
        return store.dead_letter(lease, now=now, error=error, outcome=outcome)

    result = _write(active, ctx, write, Outcome.DEAD)
    if result == Outcome.DEAD:
        log.error("occurrence.dead", error_type=error.type, error=error.message, outcome=outcome)
    return result


def _retry(
    active: ActiveRun, exc: BaseException, ctx: Execution, *, outcome: AttemptOutcome
) -> Outcome:
    """Record a failed attempt and when the next one may start (no lease is held meanwhile)."""
    error = _safe(exc, ctx)
    schedule = active.schedule
    delay = backoff_delay(
        active.lease.failures + 1, base=schedule.backoff, cap=schedule.max_backoff
    )

    def write(lease: Lease, now: datetime) -> bool:
        return store.fail(lease, now=now, error=error, retry_at=later(now, delay), outcome=outcome)

    result = _write(active, ctx, write, Outcome.RETRY)
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


def _release(lease: Lease, now: datetime) -> bool:
    released = bool(store.release([lease], now=now).accepted)
    if released:
        store.notify("release")
        log.info("occurrence.released")
    return released


def _write(
    active: ActiveRun,
    ctx: Execution,
    write: Callable[[Lease, datetime], bool],
    success: Outcome,
) -> Outcome:
    """Write an outcome, fenced; through a store outage, keep trying until the lease expires.

    After that another replica may own the occurrence and will run it again: the job's
    idempotency (the occurrence key) makes that safe.
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
            if ctx.clock.now() >= active.lease.expires_at or ctx.stop_writing.is_set():
                log.error(
                    "outcome.unwritten",
                    outcome=success.value,
                    error=loggable(exc, patterns=ctx.settings.REDACT_PATTERNS, max_chars=200),
                )
                return Outcome.UNWRITTEN
            ctx.stop_writing.wait(backoff.next_delay())
