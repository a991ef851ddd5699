"""Running one claimed occurrence and writing its outcome through the store."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import structlog

from .. import store
from ..clock import Clock
from ..conf import JobsSettings
from ..exceptions import LeaseLost, PermanentFailure, UnknownJob
from ..models import AttemptOutcome, Schedule
from ..registry import Registry
from ..safe_error import SafeError
from ..store import Lease
from .retry import backoff_delay
from .run import Run

log = structlog.get_logger("django_jobs.worker")


class Outcome(enum.StrEnum):
    COMPLETED = "completed"
    RETRY = "retry"
    DEAD = "dead"
    LEASE_LOST = "lease_lost"


@dataclass(frozen=True)
class Execution:
    clock: Clock
    settings: JobsSettings
    registry: Registry


def execute(lease: Lease, schedule: Schedule, ctx: Execution) -> Outcome:
    """Run the handler of ``lease``'s occurrence and record the outcome, fenced by its token.

    A handler error becomes a retry at the schedule's backoff, or dead once the schedule's
    ``max_attempts`` have failed; ``PermanentFailure`` and an unknown job are dead at once.
    A lost lease records nothing: the replica that holds the occurrence now will.
    """
    bound = log.bind(
        occurrence=str(lease.occurrence_id),
        schedule=schedule.key,
        tenant=lease.tenant,
        attempt=lease.attempt,
        token=lease.token,
    )
    run = Run(lease, clock=ctx.clock, deadline=lease.scheduled_at + schedule.timeout)
    try:
        handler = ctx.registry.get(schedule.job)
    except UnknownJob as exc:  # a bad schedule is reported and left alone, never retried
        return _dead(lease, exc, ctx, bound)
    try:
        handler.func(run)
    except LeaseLost:
        bound.warning("lease.lost")
        return Outcome.LEASE_LOST
    except PermanentFailure as exc:
        return _dead(lease, exc, ctx, bound)
    except Exception as exc:
        if lease.failures + 1 >= schedule.max_attempts:
            return _dead(lease, exc, ctx, bound)
        return _retry(lease, schedule, exc, ctx, bound)
    if run.completed or store.complete([lease], now=ctx.clock.now()).accepted:
        bound.info("occurrence.completed")
        return Outcome.COMPLETED
    bound.warning("occurrence.fenced_out")
    return Outcome.LEASE_LOST


def _safe(exc: BaseException, ctx: Execution) -> SafeError:
    return SafeError.from_exception(exc, max_chars=ctx.settings.ERROR_MESSAGE_MAX_CHARS)


def _dead(
    lease: Lease, exc: BaseException, ctx: Execution, bound: structlog.BoundLogger
) -> Outcome:
    error = _safe(exc, ctx)
    if store.dead_letter(lease, now=ctx.clock.now(), error=error, outcome=AttemptOutcome.FAILED):
        bound.error("occurrence.dead", error_type=error.type, error=error.message)
        return Outcome.DEAD
    bound.warning("occurrence.fenced_out")
    return Outcome.LEASE_LOST


def _retry(
    lease: Lease,
    schedule: Schedule,
    exc: BaseException,
    ctx: Execution,
    bound: structlog.BoundLogger,
) -> Outcome:
    error = _safe(exc, ctx)
    now = ctx.clock.now()
    retry_at = now + backoff_delay(
        lease.failures + 1, base=schedule.backoff, cap=schedule.max_backoff
    )
    if store.fail(lease, now=now, error=error, retry_at=retry_at):
        bound.warning(
            "occurrence.failed", error_type=error.type, error=error.message, retry_at=retry_at
        )
        return Outcome.RETRY
    bound.warning("occurrence.fenced_out")
    return Outcome.LEASE_LOST
