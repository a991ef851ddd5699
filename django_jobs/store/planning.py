"""Planning: what the worker's plan pass reads and writes, and the occurrences services plan.

A plan pass (``django_jobs/worker/planning.py``) comes here twice, in one transaction: once to
read its batch (``read_plan_batch``: due schedules locked, with their missed and running
occurrences) and once to write what the planner decided (``write_plan``). Between the two it
decides, without the database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple
from uuid import UUID

from psycopg import sql
from psycopg.types.json import Jsonb

from .. import audit
from ..clock import ensure_aware_utc
from ..models import Schedule
from ..scheduling.policies import Overlap
from ._sql import (
    _SCHEDULE_VALUES,
    CLAIMABLE_IN,
    _all_loadable,
    _capped,
    _execute,
    _loadable,
    _named_rows,
    _not_paused,
    load_queries,
)
from .records import PlannedOccurrence

# ``parked_field`` of a schedule parked because no replica has its job (``park_unplannable``).
_JOB_FIELD = "job"


def _when_unloadable(then: Callable[[str], sql.Composable]) -> str:
    """SQL: ``CASE`` over the columns of the row ``r`` Python may fail to hold, ``then(c)``
    for the first that it cannot."""
    cases = sql.SQL(" ").join(
        sql.SQL("WHEN NOT {} THEN {}").format(
            sql.SQL(_loadable(sql.Identifier("r", column).as_string(None), kind)), then(column)
        )
        for column, kind in _SCHEDULE_VALUES
    )
    return sql.SQL("CASE {} END").format(cases).as_string(None)


QUERIES = load_queries(
    "planning",
    not_paused=_not_paused("s.tenant", "s.key"),
    loadable=_all_loadable("s", _SCHEDULE_VALUES),
    unloadable_row=_all_loadable("r", _SCHEDULE_VALUES),
    unloadable_field=_when_unloadable(sql.Literal),
    unloadable_value=_when_unloadable(
        lambda column: sql.SQL("{}::text").format(sql.Identifier("r", column))
    ),
    loadable_instant=_loadable("o.scheduled_at", "timestamptz"),
    capped_max_delay=_capped("t.max_delay"),
    claimable_states=CLAIMABLE_IN,
)


# --- Occurrences planned by services and tests ---------------------------------------------


def plan(occurrences: Iterable[PlannedOccurrence], *, now: datetime) -> list[UUID]:
    """Insert occurrences idempotently and advance each schedule's ``last_scheduled_at``
    recovery point to its latest instant; return the identities that were new. One statement.

    Planning an instant that already exists (on this replica or any other, concurrently or
    not) changes nothing: the identity is the primary key and the insert says
    ``ON CONFLICT DO NOTHING``. (The plan pass writes through ``write_plan``.)
    """
    return _plan(occurrences, now=now, move_recovery_point=True)


def insert_occurrences(occurrences: Iterable[PlannedOccurrence], *, now: datetime) -> list[UUID]:
    """Insert occurrences idempotently, moving no schedule's recovery point (an instant
    planned by hand: the planner's own instants before it are still planned); return the
    identities that were new. One statement."""
    return _plan(occurrences, now=now, move_recovery_point=False)


def _plan(
    occurrences: Iterable[PlannedOccurrence], *, now: datetime, move_recovery_point: bool
) -> list[UUID]:
    items = list(occurrences)
    if not items:
        return []
    params = {**_planned(items, now=now), "move_recovery_point": move_recovery_point}
    return [row.id for row in _named_rows(QUERIES["plan"], params)]


def _planned(items: Sequence[PlannedOccurrence], *, now: datetime) -> dict[str, Any]:
    """The parameters of ``insert_planned``: ``items`` as parallel arrays."""
    return {
        "ids": [p.id for p in items],
        "schedules": [p.schedule_id for p in items],
        "tenants": [p.tenant for p in items],
        "instants": [ensure_aware_utc(p.scheduled_at, name="scheduled_at") for p in items],
        "reasons": [p.skip_reason.value if p.skip_reason else "" for p in items],
        "triggers": [p.trigger.value for p in items],
        # NULL when none is given (the plan pass): unnest pads it, and each row takes its
        # schedule's arguments.
        "args": (
            [None if p.args is None else Jsonb(p.args) for p in items]
            if any(p.args is not None for p in items)
            else None
        ),
        "now": ensure_aware_utc(now, name="now"),
    }


# --- The plan pass, move 1: read ------------------------------------------------------------


class Unreadable(NamedTuple):
    """A due schedule parked because a column holds a value Python cannot (``park_unreadable``)."""

    name: str  # '<tenant>/<key>', or the key alone
    column: str


@dataclass(frozen=True)
class PlanningContext:
    """What the planner needs from the occurrence table about the schedules it plans."""

    missed: dict[int, list[datetime]]  # schedule id -> instants that never started, too late
    running: frozenset[int]  # schedules with an occurrence processing now


@dataclass(frozen=True)
class PlanBatch:
    """Everything one plan pass decides from: what ``read_plan_batch`` read and locked."""

    unreadable: list[Unreadable]  # parked before any row was loaded
    schedules: list[Schedule]  # locked until the pass's transaction ends
    context: PlanningContext


def read_plan_batch(
    *,
    now: datetime,
    limit: int,
    exclude_keys: Sequence[str] = (),
    jobs: Sequence[str] | None = None,
    ahead: timedelta = timedelta(0),
) -> PlanBatch:
    """The read move of a plan pass. Must run inside the pass's transaction, which holds the
    locks until it commits:

    1. park the due schedules holding a value Python cannot hold (``park_unreadable``);
    2. lock up to ``limit`` due schedules (``lock_schedules_to_plan``, with the kill switch's
       ``exclude_keys`` and this replica's ``jobs``; due within ``ahead`` too);
    3. read their missed and running occurrences (``planning_context``).
    """
    unreadable = park_unreadable(now=now, limit=limit)
    schedules = lock_schedules_to_plan(
        now=now, limit=limit, exclude_keys=exclude_keys, jobs=jobs, ahead=ahead
    )
    return PlanBatch(unreadable, schedules, planning_context(schedules, now=now))


def lock_schedules_to_plan(
    *,
    now: datetime,
    limit: int,
    exclude_keys: Sequence[str] = (),
    jobs: Sequence[str] | None = None,
    ahead: timedelta = timedelta(0),
) -> list[Schedule]:
    """Lock up to ``limit`` active, enabled schedules whose ``next_due_at`` has come, or
    comes within ``ahead``.

    Must run inside a transaction: the rows stay locked (``SKIP LOCKED`` for other planners)
    until it commits, so one replica at a time plans a given schedule. Schedules named by the
    kill switch (``exclude_keys``) are not planned. With ``jobs`` (the names this replica has
    handlers for), only their schedules are, and schedules parked because their job had no
    handler (``park_unplannable``) whose job is among them are taken up again first.
    """
    now = ensure_aware_utc(now, name="now")
    params: dict[str, Any] = {
        "now": now,
        "horizon": now + ahead,
        "limit": limit,
        "excluded": list(exclude_keys),
        "jobs": None if jobs is None else list(jobs),
        "job_field": _JOB_FIELD,
    }
    if jobs is not None:
        _execute(QUERIES["take_up_parked_jobs"], params)
    return list(Schedule.objects.raw(QUERIES["lock_due_schedules"], params))


def park_unreadable(*, now: datetime, limit: int) -> list[Unreadable]:
    """Park due schedules holding a value Python cannot hold (see ``_sql._loadable``), naming
    the column and the value: loading such a row would fail the pass that read it, at every
    pass of every replica. One statement."""
    params = {"now": ensure_aware_utc(now, name="now"), "limit": limit}
    return [
        Unreadable(name=_name(row), column=row.field)
        for row in _named_rows(QUERIES["park_unreadable"], params)
    ]


def _name(row: Any) -> str:
    """'<tenant>/<key>', or the key alone, of a row with ``tenant`` and ``key`` columns."""
    return f"{row.tenant}/{row.key}" if row.tenant else row.key


def planning_context(schedules: Sequence[Schedule], *, now: datetime) -> PlanningContext:
    """For every schedule of a plan pass, in one statement (the live-rows partial index):

    - its scheduled instants that never started and are now later than its ``max_delay`` (the
      planner applies the misfire policy to them);
    - whether one of its occurrences is processing now (asked only of overlap ``skip``
      schedules, the only policy that needs it).
    """
    if not schedules:
        return PlanningContext({}, frozenset())
    params = {
        "ids": [s.pk for s in schedules],
        "tenants": [s.tenant for s in schedules],
        "max_delays": [s.max_delay for s in schedules],
        "ask_running": [s.overlap == Overlap.SKIP for s in schedules],
        "now": ensure_aware_utc(now, name="now"),
    }
    missed: dict[int, list[datetime]] = {}
    running: set[int] = set()
    for row in _named_rows(QUERIES["planning_context"], params):
        if row.processing:
            running.add(row.schedule_id)
        else:
            missed.setdefault(row.schedule_id, []).append(row.scheduled_at.astimezone(UTC))
    return PlanningContext(missed, frozenset(running))


# --- The plan pass, move 3: write -----------------------------------------------------------


class Advance(NamedTuple):
    """A decided schedule's new recovery point and next due instant."""

    schedule_id: int
    last_scheduled_at: datetime | None
    next_due_at: datetime | None


class Parked(NamedTuple):
    """A schedule the planner refuses, with the field and the reason (``park``)."""

    schedule_id: int
    field: str
    reason: str


@dataclass(frozen=True)
class MissedSummary:
    """Missed instants of ``schedule`` skipped without rows of their own (one audit record)."""

    schedule: Schedule
    count: int
    first: datetime
    last: datetime


@dataclass
class PlanWrite:
    """Everything a plan pass writes, for any number of schedules (``write_plan``)."""

    occurrences: list[PlannedOccurrence] = field(default_factory=list)
    advances: list[Advance] = field(default_factory=list)
    # Planned occurrences, never started, now missed: run late, or skipped with a reason.
    catch_up: list[UUID] = field(default_factory=list)
    skip: list[tuple[UUID, str]] = field(default_factory=list)
    summaries: list[MissedSummary] = field(default_factory=list)
    parked: list[Parked] = field(default_factory=list)

    @classmethod
    def of(cls, parts: Iterable[PlanWrite]) -> PlanWrite:
        """One write of several (each schedule's, say)."""
        whole = cls()
        for part in parts:
            whole.occurrences += part.occurrences
            whole.advances += part.advances
            whole.catch_up += part.catch_up
            whole.skip += part.skip
            whole.summaries += part.summaries
            whole.parked += part.parked
        return whole


class Skipped(NamedTuple):
    """An occurrence a plan write recorded skipped (new, or a missed one the policy decided)."""

    occurrence_id: UUID
    schedule_id: int
    scheduled_at: datetime
    reason: str


def write_plan(write: PlanWrite, *, now: datetime) -> list[Skipped]:
    """The write move of a plan pass, in the caller's transaction (a savepoint, so that a
    value the database refuses rolls back this write alone); returns the occurrences it
    recorded skipped, each once (an instant planned before, or a missed occurrence another
    claim took meanwhile, is not among them):

    1. insert the new occurrences and set each decided schedule's recovery point and next due
       instant (one statement);
    2. park the schedules the planner refuses (one statement);
    3. mark the missed occurrences the policy decided, of every schedule (one statement);
    4. record each misfire summary through the audit writer.
    """
    now = ensure_aware_utc(now, name="now")
    skipped: list[Skipped] = []
    if write.occurrences or write.advances:
        params = {
            **_planned(write.occurrences, now=now),
            "advance_ids": [a.schedule_id for a in write.advances],
            "lasts": [a.last_scheduled_at for a in write.advances],
            "nexts": [a.next_due_at for a in write.advances],
        }
        skipped += [_skipped(row) for row in _named_rows(QUERIES["write_plan"], params)]
    park(write.parked, now=now)
    if write.catch_up or write.skip:
        params = {
            "catch_up": write.catch_up,
            "skip_ids": [i for i, _ in write.skip],
            "reasons": [r for _, r in write.skip],
            "now": now,
        }
        skipped += [_skipped(row) for row in _named_rows(QUERIES["mark_missed"], params)]
    for summary in write.summaries:
        record_skip_summary(
            summary.schedule, now=now, count=summary.count, first=summary.first, last=summary.last
        )
    return skipped


def _skipped(row: Any) -> Skipped:
    """An occurrence ``write_plan`` or ``mark_missed`` recorded skipped, read by the names of
    the statement's columns (``id``, ``schedule_id``, ``scheduled_at``, ``skip_reason``): the
    two statements need not list them in the same order."""
    return Skipped(
        occurrence_id=row.id,
        schedule_id=row.schedule_id,
        scheduled_at=row.scheduled_at.astimezone(UTC),
        reason=row.skip_reason,
    )


def withdraw_planned_ahead(schedule_ids: Sequence[int], *, now: datetime) -> None:
    """A record's timing or status changed: its occurrences planned ahead of their
    instant (``PLAN_AHEAD_SECONDS``; never started, not yet due) are deleted and its recovery
    point brought back to ``now``, so they are planned again from the changed record. One
    statement, in the caller's transaction (the change's)."""
    if schedule_ids:
        params = {"ids": list(schedule_ids), "now": ensure_aware_utc(now, name="now")}
        _execute(QUERIES["withdraw_planned_ahead"], params)


def park(parked: Sequence[Parked], *, now: datetime) -> None:
    """Stop planning schedules the planner refuses, each with the field and the reason:
    ``next_due_at`` cleared until the record is written
    again (sync, ``upsert_schedule``, enable). One statement."""
    if not parked:
        return
    params = {
        "now": ensure_aware_utc(now, name="now"),
        "ids": [p.schedule_id for p in parked],
        "fields": [p.field for p in parked],
        "reasons": [p.reason for p in parked],
    }
    _execute(QUERIES["park"], params)


def record_skip_summary(
    schedule: Schedule, *, now: datetime, count: int, first: datetime, last: datetime
) -> None:
    """The one record that stands for missed occurrences skipped without rows of their own."""
    audit.record(
        at=now,
        actor=audit.PLANNER,
        action="misfire.skipped",
        tenant=schedule.tenant,
        schedule_id=schedule.pk,
        reason=f"{count} missed occurrences skipped by misfire policy {schedule.misfire}",
        after={"count": count, "first": first, "last": last},
    )


# --- Around the plan pass ---------------------------------------------------------------------


def park_unplannable(
    *, now: datetime, jobs: Sequence[str], overdue: timedelta, replica: str, limit: int
) -> list[str]:
    """Park schedules due for longer than ``overdue`` whose job has no handler here
    (``jobs``): no replica planned them in that time, so none has one. A replica of a
    release that has the job takes them up again (``lock_schedules_to_plan``). Returns
    their names."""
    now = ensure_aware_utc(now, name="now")
    params = {
        "now": now,
        "before": now - overdue,
        "jobs": list(jobs),
        "replica": replica,
        "overdue": f"{overdue.total_seconds():g} s",
        "limit": limit,
        "job_field": _JOB_FIELD,
    }
    return [_name(row) for row in _named_rows(QUERIES["park_unplannable"], params)]


def lock_for_sync() -> None:
    """Serialise schedule syncs (every replica syncs at start) for the caller's transaction."""
    _execute(QUERIES["lock_for_sync"], {})
