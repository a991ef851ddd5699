"""The plan pass: turn due schedule instants into occurrences, applying misfire and overlap.

Any replica may plan: the schedules it plans are locked (``SKIP LOCKED``) for the length of
its pass, and planning an instant twice is a no-op (the identity is the primary key).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import structlog
from django.db import DatabaseError, DataError, IntegrityError, transaction

from .. import store
from ..conf import get_settings
from ..models import Schedule, SkipReason, Trigger
from ..safe_error import loggable
from ..scheduling import planner, timings
from ..scheduling.policies import Misfire, Overlap
from ..store import PlannedOccurrence

log = structlog.get_logger("django_jobs.planner")


@dataclass
class PlanPass:
    schedules: int = 0
    planned: int = 0
    skipped: int = 0
    invalid: list[str] = field(default_factory=list)

    def count(self, decision: planner.PlanDecision) -> None:
        self.planned += len(decision.run) + len(decision.replay) + len(decision.catch_up)
        self.skipped += len(decision.skip) + len(decision.skip_pending)
        if decision.summary:
            self.skipped += decision.summary.count


def plan_due(*, now: datetime, limit: int = 500) -> PlanPass:
    """Plan every schedule whose next due instant has come (up to ``limit`` per pass).

    The pass is set-based: a handful of statements for the whole batch (lock the due
    schedules, read their missed and running occurrences, insert every new occurrence,
    advance every schedule), so its cost grows with what is due, not with round trips per
    schedule. A schedule whose record cannot be evaluated is reported (``schedule.invalid``)
    and parked (``next_due_at`` cleared) so it is not retried every pass; the others are
    planned. If the database refuses a value of the batch (an instant plus its max_delay out
    of range), the batch is planned again one schedule at a time, each in a savepoint, so
    only the offending schedule is parked.
    """
    result = PlanPass()
    with transaction.atomic():
        schedules = store.lock_schedules_to_plan(now=now, limit=limit)
        result.schedules = len(schedules)
        if not schedules:
            return result
        try:
            with transaction.atomic():  # a savepoint for the batch
                _plan_batch(schedules, now=now, result=result)
        except (DataError, IntegrityError):
            result = PlanPass(schedules=len(schedules))
            _plan_one_by_one(schedules, now=now, result=result)
    if result.planned or result.skipped:
        log.info(
            "plan.pass",
            schedules=result.schedules,
            planned=result.planned,
            skipped=result.skipped,
            invalid=len(result.invalid),
        )
    return result


def _plan_batch(schedules: list[Schedule], *, now: datetime, result: PlanPass) -> None:
    context = store.planning_context(schedules, now=now)
    occurrences: list[PlannedOccurrence] = []
    progress: list[tuple[int, datetime | None, datetime | None]] = []
    decided: list[tuple[Schedule, planner.PlanDecision]] = []
    for schedule in schedules:
        try:
            decision = decide(
                schedule,
                now=now,
                pending_missed=context.missed.get(schedule.pk, ()),
                previous_running=schedule.pk in context.running,
            )
            planned = to_plan(schedule, decision)
        except DatabaseError:
            raise
        except Exception as exc:
            _report_invalid(schedule, exc, result)
            progress.append((schedule.pk, schedule.last_scheduled_at, None))
            continue
        occurrences += planned
        progress.append((schedule.pk, decision.last_scheduled_at, decision.next_due_at))
        decided.append((schedule, decision))
    store.plan(occurrences, now=now, advance=progress)
    for schedule, decision in decided:
        _write_missed_and_summary(schedule, decision, now=now)
        result.count(decision)


def _plan_one_by_one(schedules: list[Schedule], *, now: datetime, result: PlanPass) -> None:
    """The batch of one schedule at a time, each in a savepoint."""
    for schedule in schedules:
        try:
            with transaction.atomic():
                _plan_batch([schedule], now=now, result=result)
        except (DataError, IntegrityError) as exc:
            # A value of this row that the database refuses: the savepoint is rolled back and
            # the schedule parked like any record that cannot be evaluated, so it never
            # blocks the others' planning.
            _park(schedule, exc, result)


def _report_invalid(schedule: Schedule, exc: BaseException, result: PlanPass) -> None:
    result.invalid.append(str(schedule))
    log.error(
        "schedule.invalid",
        schedule=str(schedule),
        error_type=type(exc).__name__,
        error=loggable(exc, patterns=get_settings().REDACT_PATTERNS, max_chars=500),
    )


def _park(schedule: Schedule, exc: BaseException, result: PlanPass) -> None:
    """Report a schedule whose record cannot be planned and clear its ``next_due_at``."""
    _report_invalid(schedule, exc, result)
    store.advance_schedule(schedule, last_scheduled_at=schedule.last_scheduled_at, next_due_at=None)


def decide(
    schedule: Schedule,
    *,
    now: datetime,
    pending_missed: Sequence[datetime],
    previous_running: bool,
) -> planner.PlanDecision:
    """The planner's decision for one schedule: pure, given what the store said about it."""
    return planner.plan(
        planner.PlanRequest(
            timing=timings.from_record(schedule),
            max_delay=schedule.max_delay,
            misfire=Misfire(schedule.misfire),
            max_catchup=schedule.max_catchup,
            last_scheduled_at=schedule.last_scheduled_at,
            since=schedule.created_at,
            now=now,
            pending_missed=pending_missed,
            overlap=Overlap(schedule.overlap),
            previous_running=previous_running,
        )
    )


def to_plan(schedule: Schedule, decision: planner.PlanDecision) -> list[PlannedOccurrence]:
    """The occurrences a decision inserts: to run (on time or replayed) and skipped."""

    def occurrence(
        instant: datetime, reason: str | None = None, trigger: Trigger = Trigger.SCHEDULE
    ) -> PlannedOccurrence:
        return PlannedOccurrence(
            schedule_id=schedule.pk,
            tenant=schedule.tenant,
            schedule_key=schedule.key,
            scheduled_at=instant,
            skip_reason=SkipReason(reason) if reason else None,
            trigger=trigger,
        )

    return (
        [occurrence(i) for i in decision.run]
        + [occurrence(i, trigger=Trigger.CATCHUP) for i in decision.replay]
        + [occurrence(i, r) for i, r in decision.skip]
    )


def _write_missed_and_summary(
    schedule: Schedule, decision: planner.PlanDecision, *, now: datetime
) -> None:
    if decision.catch_up or decision.skip_pending:
        store.mark_missed(schedule, now=now, catch_up=decision.catch_up, skip=decision.skip_pending)
    if decision.summary:
        summary = decision.summary
        store.record_skip_summary(
            schedule, now=now, count=summary.count, first=summary.first, last=summary.last
        )
    if decision.run or decision.replay or decision.skip or decision.summary:
        log.debug(
            "schedule.planned",
            schedule=str(schedule),
            run=len(decision.run),
            replayed=len(decision.replay) + len(decision.catch_up),
            skipped=len(decision.skip) + len(decision.skip_pending),
            summarised=decision.summary.count if decision.summary else 0,
        )
