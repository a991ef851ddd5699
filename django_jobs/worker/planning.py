"""The plan pass: turn due schedule instants into occurrences, applying misfire and overlap.

A pass is three moves: read the batch (one store call), decide it (the pure planner, here),
write what was decided (one store call); ``plan_due`` numbers them. Any replica may plan: the
schedules it plans are locked (``SKIP LOCKED``) for the length of its pass, and planning an
instant twice is a no-op (the identity is the primary key).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

import structlog
from django.db import DatabaseError, DataError, IntegrityError, transaction

from .. import store
from ..conf import get_settings
from ..identity import occurrence_id
from ..models import Schedule
from ..safe_error import loggable
from ..scheduling import planner, timings
from ..scheduling.policies import Misfire, Overlap
from ..spec import column_problem
from ..store import PlannedOccurrence
from .alerts import send_skipped

log = structlog.get_logger("django_jobs.planner")


# How long one plan pass may keep deciding schedules: the schedules it did not reach stay due
# and go first in the next pass, and the replica heartbeats, enforces timeouts and claims in
# between. The deadline reaches inside a decision too: counting a long gap stops at it
# (``planner.PlanRequest.expired``), a day of instants after it at most.
PASS_BUDGET_SECONDS = 0.5


def due_within(ahead: timedelta) -> timedelta:
    """How soon a schedule's next instant must be for a pass to plan it, with the plan-ahead
    window ``ahead``: half of it. Its instants are then planned up to the whole window, so
    its row is written once for every half window of its instants, not at every pass as each
    comes within the window (#38; tests/test_row_versions.py)."""
    return ahead / 2


_FUTURE_SLACK = timedelta(hours=1)
# The columns of a row the planner plans with, checked as the spec checks a declaration's.
_PLANNED_COLUMNS = ("max_delay", "misfire", "overlap", "max_catchup")


class RefusedRow(ValueError):
    """A value of a schedule row the planner will not plan with; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass
class PlanPass:
    """What one plan pass did (``plan_due``)."""

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


def plan_due(
    *,
    now: datetime,
    limit: int = 500,
    exclude_keys: Sequence[str] = (),
    jobs: Sequence[str] | None = None,
    budget_seconds: float | None = None,
    ahead: timedelta = timedelta(0),
) -> PlanPass:
    """Plan every schedule whose next due instant has come (up to ``limit`` per pass).

    A pass is three moves in one transaction, so its cost grows with what is due, not with
    round trips per schedule:

    1. read (``store.read_plan_batch``): park the due rows holding a value Python cannot
       hold, lock the due schedules, read their missed and running occurrences;
    2. decide (``decide_batch``, no database): check every row (``check_row``) and ask the
       planner what to do with it (``decide``, ``to_write``). A schedule whose record cannot
       be evaluated, or says what the planner refuses, is reported (``schedule.invalid``) and
       parked with the field and the reason, so it is not retried every pass;
    3. write (``store.write_plan``): every new occurrence, every schedule's advance, the
       missed occurrences decided, the misfire summaries and the parked rows. If the database
       refuses a value of the batch (an instant plus its max_delay out of range), the
       schedules are written again one at a time, each in a savepoint, so only the offending
       one is parked.

    Schedules named by the kill switch (``exclude_keys``) are not planned; with ``jobs``, only
    schedules of those jobs are. With ``budget_seconds``, schedules not decided within it are
    left due for the next pass. With ``ahead``, schedules due within ``due_within(ahead)`` are
    planned now, their instants up to ``now + ahead`` on time (``planner.PlanRequest.ahead``).
    """
    began = time.monotonic()  # a duration, not an instant: no clock needed
    began_cpu = time.thread_time()
    deadline = math.inf if budget_seconds is None else began + budget_seconds
    result = PlanPass()
    with transaction.atomic():
        batch = store.read_plan_batch(
            now=now, limit=limit, exclude_keys=exclude_keys, jobs=jobs, ahead=due_within(ahead)
        )
        for name, column in batch.unreadable:
            result.invalid.append(name)
            log.error("schedule.invalid", schedule=name, field=column, error_type="DataError")
        result.schedules = len(batch.schedules)
        if not batch.schedules:
            return result
        decided = decide_batch(batch, now=now, deadline=deadline, result=result, ahead=ahead)
        _write(decided, now=now, result=result)
    if result.planned or result.skipped or result.invalid:
        _log_pass(result, began=began, began_cpu=began_cpu)
    return result


def _log_pass(result: PlanPass, *, began: float, began_cpu: float) -> None:
    """``plan.pass``: what the pass did, its wall seconds, and the CPU seconds the pass's
    thread spent (``cpu_seconds``: its own work, however many processes share the cores)."""
    log.info(
        "plan.pass",
        schedules=result.schedules,
        planned=result.planned,
        skipped=result.skipped,
        invalid=len(result.invalid),
        more=result.more,
        seconds=round(time.monotonic() - began, 3),
        cpu_seconds=round(time.thread_time() - began_cpu, 3),
    )


@dataclass(frozen=True)
class Decided:
    """What the planner decided for one schedule, and what writing it takes. A refused row
    has no decision: its write parks it."""

    schedule: Schedule
    decision: planner.PlanDecision | None
    write: store.PlanWrite


def decide_batch(
    batch: store.PlanBatch,
    *,
    now: datetime,
    deadline: float,
    result: PlanPass,
    ahead: timedelta = timedelta(0),
) -> list[Decided]:
    """The decide move: each schedule of ``batch``, in order, until ``time.monotonic()``
    passes ``deadline`` (those not reached stay due: first in the next pass). No database:
    refused rows are reported in ``result`` and parked by their write."""
    decided = []

    def expired() -> bool:
        return time.monotonic() > deadline

    for n, schedule in enumerate(batch.schedules):
        if n and time.monotonic() > deadline:
            result.more += len(batch.schedules) - n
            break
        try:
            check_row(schedule, now=now)
            decision = decide(
                schedule,
                now=now,
                pending_missed=batch.context.missed.get(schedule.pk, ()),
                previous_running=schedule.pk in batch.context.running,
                ahead=ahead,
                expired=expired,
            )
            write = to_write(schedule, decision)
        except DatabaseError:
            raise  # never a refused row: the pass fails, as an outage does
        except Exception as exc:
            parked = _report_invalid(schedule, exc, result)
            decided.append(Decided(schedule, None, store.PlanWrite(parked=[parked])))
            continue
        decided.append(Decided(schedule, decision, write))
    return decided


def _write(decided: list[Decided], *, now: datetime, result: PlanPass) -> None:
    """The write move: the whole batch in a savepoint; if the database refuses a value of it,
    one schedule at a time, each in a savepoint, parking the ones it refuses. The occurrences
    it recorded skipped are alerted once the pass's transaction commits."""
    schedules = {d.schedule.pk: d.schedule for d in decided}
    try:
        with transaction.atomic():
            skipped = store.write_plan(store.PlanWrite.of(d.write for d in decided), now=now)
            send_skipped(skipped, schedules, replica="")
        written = decided
    except (DataError, IntegrityError):
        written = []
        for one in decided:
            try:
                with transaction.atomic():
                    skipped = store.write_plan(one.write, now=now)
                    send_skipped(skipped, schedules, replica="")
                written.append(one)
            except (DataError, IntegrityError) as exc:
                # A value of this row that the database refuses: the savepoint is rolled
                # back and the schedule parked like any record that cannot be evaluated, so
                # it never blocks the others' planning.
                parked = _report_invalid(one.schedule, exc, result)
                store.write_plan(store.PlanWrite(parked=[parked]), now=now)
    for one in written:
        if one.decision is not None:
            result.count(one.decision)
            _log_planned(one.schedule, one.decision)


def _report_invalid(schedule: Schedule, exc: BaseException, result: PlanPass) -> store.Parked:
    """Log a schedule the planner refuses; return how it is parked (the field, the reason)."""
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
    return store.Parked(schedule.pk, field_name[:50], f"{type(exc).__name__}: {reason}")


def check_row(schedule: Schedule, *, now: datetime) -> None:
    """Refuse (``RefusedRow``, naming the field) a row the planner must not trust: what it
    plans with that the spec of a record refuses (``spec.py``: delay, policies, catch-up cap,
    as a declaration is refused), instants in the future. The timing itself is checked by
    ``timings.from_record``. Rows reach the database
    by other roads than the service layer (a manual UPDATE, an older release, a bad
    migration), so nothing is taken on trust here."""
    for column in _PLANNED_COLUMNS:
        message = column_problem(column, getattr(schedule, column))
        if message is not None:
            raise RefusedRow(column, message)
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
    ahead: timedelta = timedelta(0),
    expired: Callable[[], bool] = lambda: False,
) -> planner.PlanDecision:
    """The planner's decision for one schedule: pure, given what the store said about it
    (and, with ``expired``, whether the pass's deadline has passed: a long count stops)."""
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
            ahead=ahead,
            expired=expired,
        )
    )


def to_plan(schedule: Schedule, decision: planner.PlanDecision) -> list[PlannedOccurrence]:
    """The occurrences a decision inserts: to run (on time or replayed) and skipped."""
    return store.planned_occurrences(schedule, decision)


def to_write(schedule: Schedule, decision: planner.PlanDecision) -> store.PlanWrite:
    """What writing a decision takes: its occurrences, the schedule's advance, the missed
    occurrences it decided (by identity) and its summary."""

    def identity(instant: datetime) -> UUID:
        return occurrence_id(schedule.tenant, schedule.key, instant)

    summary = decision.summary
    return store.PlanWrite(
        occurrences=to_plan(schedule, decision),
        advances=[store.Advance(schedule.pk, decision.last_scheduled_at, decision.next_due_at)],
        catch_up=[identity(i) for i in decision.catch_up],
        skip=[(identity(i), reason) for i, reason in decision.skip_pending],
        summaries=[]
        if summary is None
        else [store.MissedSummary(schedule, summary.count, summary.first, summary.last)],
    )


def _log_planned(schedule: Schedule, decision: planner.PlanDecision) -> None:
    if decision.run or decision.replay or decision.skip or decision.summary:
        log.debug(
            "schedule.planned",
            schedule=str(schedule),
            run=len(decision.run),
            replayed=len(decision.replay) + len(decision.catch_up),
            skipped=len(decision.skip) + len(decision.skip_pending),
            summarised=decision.summary.count if decision.summary else 0,
        )
