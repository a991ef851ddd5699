"""The plan pass: turn due schedule instants into occurrences, applying misfire and overlap.

Any replica may plan: the schedules it plans are locked (``SKIP LOCKED``) for the length of
its pass, and planning an instant twice is a no-op (the identity is the primary key).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import structlog
from django.db import DatabaseError, DataError, IntegrityError, transaction

from .. import store
from ..conf import get_settings
from ..models import Schedule, SkipReason, Trigger
from ..safe_error import loggable
from ..scheduling import planner, timings
from ..scheduling.policies import MAX_DURATION, Misfire, Overlap
from ..store import PlannedOccurrence

log = structlog.get_logger("django_jobs.planner")


# How long one plan pass may keep deciding schedules (each decision is bounded by the
# planner): the schedules it did not reach stay due and go first in the next pass, and the
# replica heartbeats, enforces timeouts and claims in between.
PASS_BUDGET_SECONDS = 0.5
_FUTURE_SLACK = timedelta(hours=1)


class RefusedRow(ValueError):
    """A value of a schedule row the planner will not plan with; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass
class PlanPass:
    schedules: int = 0
    planned: int = 0
    skipped: int = 0
    invalid: list[str] = field(default_factory=list)
    # Schedules the pass left work for (a long gap, many on-time instants, or not reached
    # within PASS_BUDGET_SECONDS): the worker plans again at its next step.
    more: int = 0

    def count(self, decision: planner.PlanDecision) -> None:
        self.planned += len(decision.run) + len(decision.replay) + len(decision.catch_up)
        self.skipped += len(decision.skip) + len(decision.skip_pending)
        if decision.summary:
            self.skipped += decision.summary.count
        self.more += decision.more


@dataclass(frozen=True)
class _Scope:
    """What a pass may plan: not the kill switch's schedules; with ``jobs``, only schedules
    of those jobs (a replica plans only work it has handlers for)."""

    exclude_keys: Sequence[str] = ()
    jobs: Sequence[str] | None = None
    deadline: float = math.inf  # time.monotonic() after which no more schedules are decided


def plan_due(
    *,
    now: datetime,
    limit: int = 500,
    exclude_keys: Sequence[str] = (),
    jobs: Sequence[str] | None = None,
    budget_seconds: float | None = None,
) -> PlanPass:
    """Plan every schedule whose next due instant has come (up to ``limit`` per pass).

    The pass is set-based: a handful of statements for the whole batch (lock the due
    schedules, read their missed and running occurrences, insert every new occurrence,
    advance every schedule), so its cost grows with what is due, not with round trips per
    schedule. Every row is checked as it is read (``check_row``): a schedule whose record
    cannot be evaluated, or says what the planner refuses, is reported (``schedule.invalid``)
    and parked with the field and the reason (``store.park``) so it is not retried every
    pass; the others are planned. If the database refuses a value of the batch (an instant
    plus its max_delay out of range), the batch is planned again one schedule at a time, each
    in a savepoint, so only the offending schedule is parked.

    Schedules named by the kill switch (``exclude_keys``) are not planned; with ``jobs``, only
    schedules of those jobs are. With ``budget_seconds``, schedules not decided within it are
    left due for the next pass.
    """
    began = time.monotonic()  # a duration, not an instant: no clock needed
    scope = _Scope(
        exclude_keys=exclude_keys,
        jobs=jobs,
        deadline=math.inf if budget_seconds is None else began + budget_seconds,
    )
    result = PlanPass()
    with transaction.atomic():
        for name, column in store.park_unreadable(now=now, limit=limit):
            result.invalid.append(name)
            log.error("schedule.invalid", schedule=name, field=column, error_type="DataError")
        schedules = store.lock_schedules_to_plan(
            now=now, limit=limit, exclude_keys=exclude_keys, jobs=jobs
        )
        result.schedules = len(schedules)
        if not schedules:
            return result
        try:
            with transaction.atomic():  # a savepoint for the batch
                _plan_batch(schedules, now=now, result=result, scope=scope)
        except (DataError, IntegrityError):
            result = PlanPass(schedules=len(schedules))
            _plan_one_by_one(schedules, now=now, result=result, scope=scope)
    if result.planned or result.skipped or result.invalid:
        log.info(
            "plan.pass",
            schedules=result.schedules,
            planned=result.planned,
            skipped=result.skipped,
            invalid=len(result.invalid),
            more=result.more,
            seconds=round(time.monotonic() - began, 3),
        )
    return result


def _plan_batch(
    schedules: list[Schedule], *, now: datetime, result: PlanPass, scope: _Scope
) -> None:
    context = store.planning_context(schedules, now=now)
    occurrences: list[PlannedOccurrence] = []
    progress: list[tuple[int, datetime | None, datetime | None]] = []
    decided: list[tuple[Schedule, planner.PlanDecision]] = []
    parked: list[tuple[int, str, str]] = []
    for n, schedule in enumerate(schedules):
        if n and time.monotonic() > scope.deadline:
            result.more += len(schedules) - n  # left due: first in the next pass
            break
        try:
            check_row(schedule, now=now)
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
            parked.append(_report_invalid(schedule, exc, result))
            continue
        occurrences += planned
        progress.append((schedule.pk, decision.last_scheduled_at, decision.next_due_at))
        decided.append((schedule, decision))
    store.plan(occurrences, now=now, advance=progress)
    store.park(parked, now=now)
    for schedule, decision in decided:
        _write_missed_and_summary(schedule, decision, now=now)
        result.count(decision)


def _plan_one_by_one(
    schedules: list[Schedule], *, now: datetime, result: PlanPass, scope: _Scope
) -> None:
    """The batch of one schedule at a time, each in a savepoint."""
    for schedule in schedules:
        try:
            with transaction.atomic():
                _plan_batch([schedule], now=now, result=result, scope=scope)
        except (DataError, IntegrityError) as exc:
            # A value of this row that the database refuses: the savepoint is rolled back and
            # the schedule parked like any record that cannot be evaluated, so it never
            # blocks the others' planning.
            store.park([_report_invalid(schedule, exc, result)], now=now)


def _report_invalid(
    schedule: Schedule, exc: BaseException, result: PlanPass
) -> tuple[int, str, str]:
    """Log a schedule the planner refuses; return how it is parked (id, field, reason)."""
    result.invalid.append(str(schedule))
    reason = loggable(exc, patterns=get_settings().REDACT_PATTERNS, max_chars=500)
    field_name = getattr(exc, "field", "") or type(exc).__name__
    log.error(
        "schedule.invalid",
        schedule=str(schedule),
        field=field_name,
        error_type=type(exc).__name__,
        error=reason,
    )
    return schedule.pk, field_name[:50], f"{type(exc).__name__}: {reason}"


def check_row(schedule: Schedule, *, now: datetime) -> None:
    """Refuse (``RefusedRow``, naming the field) a row the planner must not trust: caps and
    durations beyond what declarations allow, policies that are not one, instants in the
    future. The timing itself is checked by ``timings.from_record``. Rows reach the database
    by other roads than the service layer (a manual UPDATE, an older release, a bad
    migration), so nothing is taken on trust here."""
    catchup = schedule.max_catchup
    if not isinstance(catchup, int) or not 0 <= catchup <= planner.MAX_CATCHUP:
        raise RefusedRow(
            "max_catchup",
            f"must be a whole number from 0 to {planner.MAX_CATCHUP}, got {catchup!r}",
        )
    delay = schedule.max_delay
    if not isinstance(delay, timedelta) or not timedelta(0) <= delay <= MAX_DURATION:
        raise RefusedRow("max_delay", f"must be from 0 to {MAX_DURATION.days} days, got {delay!r}")
    for name, policy in (("misfire", Misfire), ("overlap", Overlap)):
        value = getattr(schedule, name)
        if value not in set(policy):
            allowed = ", ".join(repr(m.value) for m in policy)
            raise RefusedRow(name, f"must be one of {allowed}, got {value!r}")
    for name in ("created_at", "last_scheduled_at"):
        instant = getattr(schedule, name)
        if instant is not None and instant > now + _FUTURE_SLACK:
            raise RefusedRow(
                name,
                f"{instant.isoformat()} is in the future (now {now.isoformat()}): the "
                "schedule would plan nothing until then",
            )


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
