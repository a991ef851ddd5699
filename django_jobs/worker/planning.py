"""The plan pass: turn due schedule instants into occurrences, applying misfire and overlap.

Any replica may plan: the schedules it plans are locked (``SKIP LOCKED``) for the length of
its pass, and planning an instant twice is a no-op (the identity is the primary key).
"""

from __future__ import annotations

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


def plan_due(*, now: datetime, limit: int = 200) -> PlanPass:
    """Plan every schedule whose next due instant has come (up to ``limit`` per pass).

    A schedule whose record cannot be evaluated is reported (``schedule.invalid``) and parked
    (``next_due_at`` cleared) so it is not retried every pass; the others are planned.
    """
    result = PlanPass()
    with transaction.atomic():
        for schedule in store.lock_schedules_to_plan(now=now, limit=limit):
            result.schedules += 1
            try:
                with transaction.atomic():  # a savepoint per schedule
                    decision = plan_schedule(schedule, now=now)
            except (DataError, IntegrityError) as exc:
                # A value of this row that the database refuses (an instant plus its max_delay
                # out of range): the savepoint is rolled back and the schedule parked like any
                # record that cannot be evaluated, so it never blocks the others' planning.
                _park(schedule, exc, result)
                continue
            except DatabaseError:
                raise  # the store is out or a lock conflicted: not the schedule's fault
            except Exception as exc:
                _park(schedule, exc, result)
                continue
            result.planned += len(decision.run) + len(decision.replay) + len(decision.catch_up)
            result.skipped += len(decision.skip) + len(decision.skip_pending)
            if decision.summary:
                result.skipped += decision.summary.count
    return result


def _park(schedule: Schedule, exc: BaseException, result: PlanPass) -> None:
    """Report a schedule whose record cannot be planned and clear its ``next_due_at``."""
    result.invalid.append(str(schedule))
    log.error(
        "schedule.invalid",
        schedule=str(schedule),
        error_type=type(exc).__name__,
        error=loggable(exc, patterns=get_settings().REDACT_PATTERNS, max_chars=500),
    )
    store.advance_schedule(schedule, last_scheduled_at=schedule.last_scheduled_at, next_due_at=None)


def plan_schedule(schedule: Schedule, *, now: datetime) -> planner.PlanDecision:
    """Plan one locked schedule up to ``now``; write what the misfire and overlap policies say.

    Steps:
    1. evaluate the record's timing after its ``last_scheduled_at`` recovery point;
    2. let the planner sort new and already-planned missed instants by the misfire policy,
       and skip due ones for overlap when the previous occurrence still runs;
    3. insert new occurrences (scheduled or skipped), decide the pending missed ones, record a
       summary for skipped instants without rows, and advance the recovery point.
    """
    decision = planner.plan(
        planner.PlanRequest(
            timing=timings.from_record(schedule),
            max_delay=schedule.max_delay,
            misfire=Misfire(schedule.misfire),
            max_catchup=schedule.max_catchup,
            last_scheduled_at=schedule.last_scheduled_at,
            since=schedule.created_at,
            now=now,
            pending_missed=store.missed_unstarted(schedule, now=now),
            overlap=Overlap(schedule.overlap),
            previous_running=store.has_running(schedule),
        )
    )

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

    store.plan(
        [occurrence(i) for i in decision.run]
        + [occurrence(i, trigger=Trigger.CATCHUP) for i in decision.replay]
        + [occurrence(i, r) for i, r in decision.skip],
        now=now,
    )
    if decision.catch_up or decision.skip_pending:
        store.mark_missed(schedule, now=now, catch_up=decision.catch_up, skip=decision.skip_pending)
    if decision.summary:
        summary = decision.summary
        store.record_skip_summary(
            schedule, now=now, count=summary.count, first=summary.first, last=summary.last
        )
    store.advance_schedule(
        schedule,
        last_scheduled_at=decision.last_scheduled_at,
        next_due_at=decision.next_due_at,
    )
    if decision.run or decision.replay or decision.skip or decision.summary:
        log.info(
            "schedule.planned",
            schedule=str(schedule),
            run=len(decision.run),
            replayed=len(decision.replay) + len(decision.catch_up),
            skipped=len(decision.skip) + len(decision.skip_pending),
            summarised=decision.summary.count if decision.summary else 0,
        )
    return decision
