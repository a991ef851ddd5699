"""Running one claimed occurrence in its own execution scope, and writing its outcome.

The scope: the thread's database connection is checked before the handler runs and cleaned
after it (``worker/session.py``); the logging context is bound to the schedule, occurrence,
attempt, tenant and fencing token (``log_scope``) and restored after. The handler runs in a
copy of that context (``invoke.call_handler``): what it binds is gone before any outcome is
logged, and the lines about the run carry the worker's values of those keys. Every outcome
write is fenced by the run's token, and retried through a store outage
(``outage.keep_writing``). Which outcome a run's end writes and counts follows the table in
``worker/outcomes.py``.

A store outage is not the job's failure: a handler that raised because the store could not be
reached, and a run whose lease could not be confirmed, give the occurrence back with an
``outage`` attempt once the store answers, and the failure count stays as it was. Whether the
store could not be reached is asked of the store, on a connection of its own
(``session.store_answers``): an error that ended only the run's own session while the store
answers (a handler that terminated its backend) is the job's failure. At most
``MAX_OUTAGE_GIVE_BACKS`` outage attempts of one occurrence in a row are given back; the next
is counted as a failure, so no occurrence is given back forever.

Every exception a handler raises is its failure, ``BaseException`` included: ``SystemExit``
and ``KeyboardInterrupt`` from a handler are recorded at once, and neither stops the replica.
A handler may say that its failures keep their traceback (``KEEPS_TRACEBACK``) and which of
them end the occurrence without a retry (``FINAL_ERRORS``): the Tasks handler does both.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog
from django.db import connection

from .. import signals, store, validation
from ..clock import LATEST, Clock, later
from ..conf import JobsSettings
from ..exceptions import Cancelled, JobsError, LeaseLost, PermanentFailure, UnknownJob
from ..logging import run_scope
from ..models import AttemptOutcome
from ..registry import Registry
from ..safe_error import SafeError, loggable
from ..store import Lease
from .alerts import FENCED_OUT, send_runs
from .inflight import ActiveRun, CancelReason
from .invoke import call_handler
from .outage import OutageLog, Unwritten, drop_connection, is_store_outage, keep_writing
from .outcomes import (
    EXCUSED,
    REFUSED,
    GiveBack,
    Outcome,
    counted_cut_off,
    counted_retry,
    ended_by_outage,
    failed_attempt,
)
from .retry import backoff_delay
from .run import Run
from .session import (
    SessionUse,
    drop_leaked_transaction,
    keep_or_close_connection,
    reset_session,
    store_answers,
    store_unreachable,
)

log = structlog.get_logger("django_jobs.worker")

# A fenced outcome write: whether the store accepted it for this lease at this instant.
Write = Callable[[Lease, datetime], bool]

# Why a run may have been cancelled through no fault of its own: a handler that stops for it
# (raises ``Cancelled``) gives the occurrence back, its attempt ``released``, no failure counted.
GIVEN_BACK_WHEN_CANCELLED = (CancelReason.SHUTDOWN, CancelReason.UNCONFIRMED)

# Outage attempts of one occurrence in a row that are given back without a failure; the next
# counts as one. An outage that outlasts a run is waited out inside that run's write
# (``keep_writing``), so a streak this long means the store kept failing this occurrence's
# runs while answering in between.
MAX_OUTAGE_GIVE_BACKS = 5


class StoreOutages(JobsError):
    """The error recorded when an occurrence's runs keep ending in a store outage."""


@dataclass(frozen=True)
class Execution:
    """What every run of a replica shares: its clock, settings, handlers, and where and how
    its outcomes are written."""

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
    with log_scope(active):
        return _give_back(active, ctx, GiveBack.UNSTARTED)


def execute(active: ActiveRun, ctx: Execution) -> Outcome:
    """Run ``active``'s handler in its own scope and record what happened."""
    # Inline runs (tests) execute inside the caller's transaction: leave that connection be.
    outer_transaction = connection.in_atomic_block
    if not outer_transaction:
        keep_or_close_connection()
    session = SessionUse()
    try:
        with log_scope(active):
            return _run_handler(active, ctx, session)
    finally:
        if not outer_transaction:
            keep_or_close_connection()
            if session.used:
                reset_session()


def _run_handler(active: ActiveRun, ctx: Execution, session: SessionUse) -> Outcome:
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
            returned = call_handler(
                handler.func, run, name=handler.name, parameters=handler.parameters
            )
        if not outer_transaction and drop_leaked_transaction():
            raise JobsError(
                f"job {schedule.job!r} returned with a database transaction still open; its "
                "writes were rolled back. Close every transaction the handler opens."
            )
    except LeaseLost:
        return _lost(active, ctx)
    except PermanentFailure as exc:
        return _dead(active, exc, ctx)
    except BaseException as exc:  # SystemExit, KeyboardInterrupt too
        outage = (
            is_store_outage(exc)
            and store_unreachable(session)
            and not store_answers(session.server)
        )
        if not outer_transaction:
            drop_leaked_transaction()
        return _failed(active, exc, ctx, outage=outage)
    return _returned(active, ctx, run, returned)


def _returned(active: ActiveRun, ctx: Execution, run: Run, returned: object) -> Outcome:
    """The handler returned: its completion is written (here with what it returned, or by
    the completer when that is ``None``), unless ``run.atomic()`` already committed it or the
    run's lease is gone. A value JSON cannot hold fails the attempt; after ``run.atomic()``
    committed, it is only logged (``result.unrecorded``): the completion stands."""
    result, problem = validation.result(returned) if returned is not None else (None, None)
    if run.completed:
        log.info("occurrence.completed")
        send_runs(signals.occurrence_completed, [active])
        if problem is not None:
            log.error("result.unrecorded", error=problem)
        elif result is not None and not store.record_result(active.lease, result):
            log.warning("result.unrecorded", error="the occurrence was replayed meanwhile")
        return Outcome.COMPLETED
    if active.reason == CancelReason.LEASE_LOST or active.abandoned:
        return _lost(active, ctx)
    if problem is not None:
        error = JobsError(
            f"job {active.schedule.job!r} returned a value that cannot be kept: {problem}"
        )
        return record_failure(active, error, ctx, outcome=AttemptOutcome.FAILED)
    if result is None and ctx.hand_over is not None:
        ctx.hand_over(active)
        return Outcome.HANDED_OVER

    def complete(lease: Lease, now: datetime) -> bool:
        return _complete(lease, now, result=result)

    written = _write(active, ctx, complete, Outcome.COMPLETED)
    if written == Outcome.COMPLETED:
        send_runs(signals.occurrence_completed, [active])
    return written


def _lost(active: ActiveRun, ctx: Execution) -> Outcome:
    """Another holder has the occurrence. If the lease lapsed because the store could not be
    reached, the attempt is excused (recorded ``outage``, its failure given back)."""
    if ended_by_outage(active.reason) and not active.abandoned:
        return _excuse(active, ctx)
    log.warning("lease.lost", reason=active.reason)
    return Outcome.LEASE_LOST


def _failed(active: ActiveRun, exc: BaseException, ctx: Execution, *, outage: bool) -> Outcome:
    """A handler error (``outage``: one the store being out of reach caused), or its reaction
    to being cancelled."""
    if active.abandoned or active.reason == CancelReason.LEASE_LOST:
        log.warning("lease.lost", error_type=type(exc).__name__)
        return Outcome.LEASE_LOST
    if ended_by_outage(active.reason) or outage:
        return give_back_after_outage(active, ctx, exc)
    if active.reason in GIVEN_BACK_WHEN_CANCELLED and isinstance(exc, Cancelled):
        return _give_back(active, ctx, GiveBack.SHUTDOWN)
    if _final(ctx, active, exc):
        return _dead(active, exc, ctx, outcome=failed_attempt(active.reason))
    return record_failure(active, exc, ctx, outcome=failed_attempt(active.reason))


def give_back_after_outage(
    active: ActiveRun, ctx: Execution, exc: BaseException | None = None, *, until: datetime = LATEST
) -> Outcome:
    """The run ended because the store could not be reached: once it answers, give the
    occurrence back (due again at once; the attempt recorded ``outage``, no failure counted),
    or, if another claim took it over meanwhile, excuse the attempt."""
    error_type = type(exc).__name__ if exc else None
    error = loggable(exc, patterns=ctx.settings.REDACT_PATTERNS, max_chars=200) if exc else None
    with log_scope(active):  # also called before the run started, and from the loop
        log.warning("occurrence.outage", error_type=error_type, error=error)
        drop_connection()  # broken, or to a server that cannot take writes
        if (streak := _outage_streak(active, ctx, until)) >= MAX_OUTAGE_GIVE_BACKS:
            too_many = StoreOutages(
                f"{streak + 1} attempts in a row ended by a store outage; this one is counted "
                f"as a failure (at most {MAX_OUTAGE_GIVE_BACKS} are given back). Last error: "
                f"{error_type}: {error}"
            )
            return record_failure(active, too_many, ctx, outcome=AttemptOutcome.FAILED, until=until)
        result = _give_back(active, ctx, GiveBack.OUTAGE, until=until)
        if result == REFUSED:
            return _excuse(active, ctx, until=until)
        return result


def _outage_streak(active: ActiveRun, ctx: Execution, until: datetime) -> int:
    """The occurrence's outage attempts in a row before this one, read once the store answers
    (0 if it does not answer by ``until``: the give-back will not be written either)."""
    streak = keep_writing(
        lambda: store.outage_streak(active.lease),
        clock=ctx.clock,
        stop=ctx.stop_writing,
        outage=ctx.outage,
        during="outcome",
        until=until,
    )
    return 0 if isinstance(streak, Unwritten) else streak


def _excuse(active: ActiveRun, ctx: Execution, *, until: datetime = LATEST) -> Outcome:
    def write(lease: Lease, now: datetime) -> bool:
        store.excuse_outage(lease, now=now)
        return True

    log.warning("lease.lost", reason=CancelReason.OUTAGE)
    return _write(active, ctx, write, EXCUSED, until=until)


def record_cut_off(active: ActiveRun, ctx: Execution, *, until: datetime) -> Outcome:
    """Record the attempt of a run the loop cut off (its handler ignored the cancellation past
    the grace); return what the loop counts for it (``outcomes.counted_cut_off``)."""
    if ended_by_outage(active.reason):
        return give_back_after_outage(active, ctx, until=until)
    if active.reason == CancelReason.TIMEOUT:
        timeout = Cancelled(f"ran past its timeout of {active.schedule.timeout} and its grace")
        outcome = failed_attempt(active.reason)
        record_failure(active, timeout, ctx, outcome=outcome, until=until)
    return counted_cut_off(active.reason)


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


def _safe(exc: BaseException, ctx: Execution, active: ActiveRun) -> SafeError:
    """What is stored of ``exc``: its type and message; its redacted traceback instead of the
    message for a job whose handler asks for it (``KEEPS_TRACEBACK``: the Tasks handler)."""
    keeps = _handler_says(ctx, active, KEEPS_TRACEBACK, False)
    return (SafeError.with_traceback if keeps else SafeError.from_exception)(
        exc,
        max_chars=ctx.settings.ERROR_MESSAGE_MAX_CHARS,
        patterns=ctx.settings.REDACT_PATTERNS,
    )


# What a handler may say of its failures, as attributes of its function (the Tasks handler
# does): that they are stored with their traceback; which of them end the occurrence at once,
# never retried: a tuple of exception types, or a function of the exception (a task's
# SystemExit and KeyboardInterrupt, and a return value that cannot be kept).
KEEPS_TRACEBACK = "django_jobs_keeps_traceback"
FINAL_ERRORS = "django_jobs_final_errors"


def _final(ctx: Execution, active: ActiveRun, exc: BaseException) -> bool:
    said = _handler_says(ctx, active, FINAL_ERRORS, ())
    return isinstance(exc, said) if isinstance(said, tuple) else bool(said(exc))


def _handler_says(ctx: Execution, active: ActiveRun, name: str, default: Any) -> Any:
    with contextlib.suppress(UnknownJob):
        return getattr(ctx.registry.get(active.schedule.job).func, name, default)
    return default


def _dead(
    active: ActiveRun,
    exc: BaseException,
    ctx: Execution,
    *,
    outcome: AttemptOutcome = AttemptOutcome.FAILED,
    until: datetime = LATEST,
) -> Outcome:
    error = _safe(exc, ctx, active)

    def write(lease: Lease, now: datetime) -> bool:
        return store.dead_letter(lease, now=now, error=error, outcome=outcome)

    result = _write(active, ctx, write, Outcome.DEAD, until=until)
    if result == Outcome.DEAD:
        log.error("occurrence.dead", error_type=error.type, error=error.message, outcome=outcome)
        send_runs(signals.occurrence_dead, [active], error=error)
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
    error = _safe(exc, ctx, active)
    schedule = active.schedule
    delay = backoff_delay(
        active.lease.failures + 1, base=schedule.backoff, cap=schedule.max_backoff
    )

    retry_at: list[datetime] = []  # the instant of the write that was accepted

    def write(lease: Lease, now: datetime) -> bool:
        retry_at[:] = [later(now, delay)]
        return store.fail(lease, now=now, error=error, retry_at=retry_at[0], outcome=outcome)

    result = _write(active, ctx, write, Outcome.RETRY, until=until)
    if result == Outcome.RETRY:
        send_runs(signals.occurrence_failed, [active], error=error, retry_at=retry_at[0])
        log.warning(
            "occurrence.failed",
            error_type=error.type,
            error=error.message,
            retry_in_s=round(delay.total_seconds(), 3),
            outcome=outcome.value,
        )
        store.notify("retry")
    return counted_retry(outcome, result)


def _complete(lease: Lease, now: datetime, *, result: object = None) -> bool:
    accepted = bool(store.complete([lease], now=now, result=result).accepted)
    if accepted:
        log.info("occurrence.completed")
    return accepted


# A give-back whose row another transaction holds is tried again this far apart: an outage's
# for up to LEASE_SECONDS, a shutdown's LOCKED_ROW_TRIES times (the drain ends in seconds). No
# claim can take a held row over meanwhile: every claim skips locked rows
# (tests/test_lost_attempts.py::test_a_give_back_skips_a_row_held_by_another_transaction_
# without_refusing_it, ::test_a_give_back_waits_out_a_row_held_longer_than_a_moment).
LOCKED_ROW_TRIES = 5
LOCKED_ROW_WAIT_SECONDS = 0.05


def _give_back(
    active: ActiveRun, ctx: Execution, why: GiveBack, *, until: datetime = LATEST
) -> Outcome:
    """Give the occurrence back unfinished (``outcomes.GiveBack``), fenced."""
    patience = (
        ctx.settings.LEASE_SECONDS
        if why is GiveBack.OUTAGE
        else LOCKED_ROW_TRIES * LOCKED_ROW_WAIT_SECONDS
    )

    def write(lease: Lease, now: datetime) -> bool:
        # A row another statement holds (the lease keeper's renewal, the completer's batch) is
        # skipped, neither accepted nor refused: try again. Usually it is held for a moment;
        # after a failover, for as long as that statement's commit waits for a synchronous
        # standby being rebuilt. Still held past ``patience`` or ``until`` (a cut-off
        # handler inside its own run.atomic()), or on a forced stop, the give-back counts as
        # refused and the lease is left to lapse.
        give_up = time.monotonic() + patience
        while True:
            result = store.release([lease], now=now, outcome=why.attempt)
            if result.accepted or result.refused:
                break
            if time.monotonic() + LOCKED_ROW_WAIT_SECONDS > give_up:
                break
            if ctx.stop_writing.wait(LOCKED_ROW_WAIT_SECONDS):
                break
            now = ctx.clock.now()
            if now >= until:
                break
        released = bool(result.accepted)
        if released:
            store.notify("release")
            log.info("occurrence.released", outcome=why.attempt.value)
        return released

    return _write(active, ctx, write, why.counted, until=until)


def _write(
    active: ActiveRun, ctx: Execution, write: Write, success: Outcome, *, until: datetime = LATEST
) -> Outcome:
    """Write an outcome, fenced; through a store outage, keep trying until the store answers
    (or ``until``, or a forced stop: ``outage.keep_writing``). A write the fence refuses is
    a lost lease."""
    accepted = keep_writing(
        lambda: write(active.lease, ctx.clock.now()),  # the keeper may have renewed the lease
        clock=ctx.clock,
        stop=ctx.stop_writing,
        outage=ctx.outage,
        during="outcome",
        until=until,
    )
    if isinstance(accepted, Unwritten):
        error = loggable(accepted.error, patterns=ctx.settings.REDACT_PATTERNS, max_chars=200)
        log.error("outcome.unwritten", outcome=success.value, error=error)
        return Outcome.UNWRITTEN
    if accepted:
        return success
    log.warning("occurrence.fenced_out")
    send_runs(signals.lease_lost, [active], reason=FENCED_OUT)
    return REFUSED


__all__ = [
    "ActiveRun",
    "CancelReason",
    "Execution",
    "Outcome",
    "execute",
    "give_back_after_outage",
    "log_scope",
    "record_cut_off",
    "record_failure",
    "release_unstarted",
]
