"""Planning: the worker's plan pass writes occurrences, missed rows, summaries and schedule
advances here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from .. import audit
from ..clock import ensure_aware_utc
from ..identity import occurrence_id
from ..models import Schedule
from ._sql import _SCHEDULE_VALUES, OCC, SCH, _all_loadable, _capped, _loadable, _not_paused, _rows
from .records import PlannedOccurrence


def plan(
    occurrences: Iterable[PlannedOccurrence],
    *,
    now: datetime,
    advance: Sequence[tuple[int, datetime | None, datetime | None]] | None = None,
) -> list[UUID]:
    """Insert occurrences idempotently; return the identities that were new.

    Planning an instant that already exists (on this replica or any other, concurrently or
    not) changes nothing: the identity is the primary key and the insert says
    ``ON CONFLICT DO NOTHING``. Advances each schedule's ``last_scheduled_at`` recovery point;
    with ``advance`` (``(schedule id, last_scheduled_at, next_due_at)`` each, the plan pass)
    sets both columns of those schedules instead, in the same statement.
    """
    items = list(occurrences)
    if not items and not advance:
        return []
    now = ensure_aware_utc(now, name="now")
    instants = [ensure_aware_utc(p.scheduled_at, name="scheduled_at") for p in items]
    if advance is None:
        progress = f"""
            UPDATE {SCH} s SET last_scheduled_at = latest.at
            FROM (SELECT schedule_id, max(scheduled_at) AS at FROM input GROUP BY schedule_id)
                 AS latest
            WHERE s.id = latest.schedule_id
              AND (s.last_scheduled_at IS NULL OR s.last_scheduled_at < latest.at)
        """
    else:
        progress = f"""
            UPDATE {SCH} s SET last_scheduled_at = t.last_at, next_due_at = t.next_at
            FROM unnest(%(advance_ids)s::bigint[], %(lasts)s::timestamptz[],
                        %(nexts)s::timestamptz[]) AS t(id, last_at, next_at)
            WHERE s.id = t.id
        """
    sql = f"""
        WITH input AS (
            SELECT * FROM unnest(
                %(ids)s::uuid[], %(schedules)s::bigint[], %(tenants)s::text[],
                %(instants)s::timestamptz[], %(reasons)s::text[], %(triggers)s::text[]
            ) AS t(id, schedule_id, tenant, scheduled_at, skip_reason, trg)
        ),
        inserted AS (
            INSERT INTO {OCC} (
                id, schedule_id, tenant, scheduled_at, state, skip_reason, trigger, due_at,
                lease_owner, fencing_token, attempts, failures, finished_at,
                last_error_type, last_error_message
            )
            SELECT id, schedule_id, tenant, scheduled_at,
                   CASE WHEN skip_reason = '' THEN 'scheduled' ELSE 'skipped' END,
                   skip_reason, trg, scheduled_at, '', 0, 0, 0,
                   CASE WHEN skip_reason = '' THEN NULL ELSE %(now)s::timestamptz END,
                   '', ''
            FROM input
            ON CONFLICT (id) DO NOTHING
            RETURNING id
        ),
        progress AS ({progress})
        SELECT id FROM inserted
    """
    advance = advance or []
    rows = _rows(
        sql,
        {
            "ids": [p.id for p in items],
            "schedules": [p.schedule_id for p in items],
            "tenants": [p.tenant for p in items],
            "instants": instants,
            "reasons": [p.skip_reason.value if p.skip_reason else "" for p in items],
            "triggers": [p.trigger.value for p in items],
            "now": now,
            "advance_ids": [a[0] for a in advance],
            "lasts": [a[1] for a in advance],
            "nexts": [a[2] for a in advance],
        },
    )
    return [row[0] for row in rows]


# --- Planning: the worker's plan pass (django_jobs/worker/planning.py) --------------------


def lock_schedules_to_plan(
    *,
    now: datetime,
    limit: int,
    exclude_keys: Sequence[str] = (),
    jobs: Sequence[str] | None = None,
) -> list[Schedule]:
    """Lock up to ``limit`` active, enabled schedules whose ``next_due_at`` has come.

    Must run inside a transaction: the rows stay locked (``SKIP LOCKED`` for other planners)
    until it commits, so one replica at a time plans a given schedule. Schedules named by the
    kill switch (``exclude_keys``) are not planned. With ``jobs`` (the names this replica has
    handlers for), only their schedules are, and schedules parked because their job had no
    handler (``park_unplannable``) whose job is among them are taken up again first.
    """
    now = ensure_aware_utc(now, name="now")
    params: dict[str, Any] = {
        "now": now,
        "limit": limit,
        "excluded": list(exclude_keys),
        "jobs": None if jobs is None else list(jobs),
    }
    if jobs is not None:
        _rows(
            f"""
            UPDATE {SCH} SET next_due_at = %(now)s, parked_at = NULL, parked_field = '',
                parked_reason = ''
            WHERE id IN (SELECT id FROM {SCH}
                         WHERE parked_field = 'job' AND job = ANY(%(jobs)s::text[])
                         FOR NO KEY UPDATE SKIP LOCKED)
            """,
            params,
        )
    sql = f"""
        SELECT * FROM {SCH} s
        WHERE s.enabled AND s.status = 'active' AND s.next_due_at <= %(now)s
          AND {_not_paused("s.tenant", "s.key")}
          AND {_all_loadable("s", _SCHEDULE_VALUES)}
          AND (%(jobs)s::text[] IS NULL OR s.job = ANY(%(jobs)s::text[]))
        ORDER BY s.next_due_at
        LIMIT %(limit)s
        FOR NO KEY UPDATE SKIP LOCKED
    """
    return list(Schedule.objects.raw(sql, params))


def park_unreadable(*, now: datetime, limit: int) -> list[tuple[str, str]]:
    """Park due schedules holding a value Python cannot hold (see ``_loadable``), naming the
    column and the value: loading such a row would fail the pass that read it, at every pass
    of every replica. One statement; returns (schedule name, column) of each."""
    field = (
        "CASE "
        + " ".join(f"WHEN NOT {_loadable(c, k)} THEN '{c}'" for c, k in _SCHEDULE_VALUES)
        + " END"
    )
    value = (
        "CASE "
        + " ".join(f"WHEN NOT {_loadable(c, k)} THEN {c}::text" for c, k in _SCHEDULE_VALUES)
        + " END"
    )
    sql = f"""
        UPDATE {SCH} s SET next_due_at = NULL, parked_at = %(now)s, parked_field = u.field,
            parked_reason = u.field || ': ' || quote_literal(u.value) || ' is beyond what '
                || 'the worker can read (an interval of at most 999,999,999 days, an instant '
                || 'from year 1 to 9999); correct the record'
        FROM (
            SELECT id, {field} AS field, {value} AS value FROM {SCH}
            WHERE enabled AND status = 'active' AND next_due_at <= %(now)s
              AND NOT ({_all_loadable(SCH, _SCHEDULE_VALUES)})
            LIMIT %(limit)s
            FOR NO KEY UPDATE SKIP LOCKED
        ) u
        WHERE s.id = u.id
        RETURNING s.tenant, s.key, u.field
    """
    rows = _rows(sql, {"now": ensure_aware_utc(now, name="now"), "limit": limit})
    return [(f"{tenant}/{key}" if tenant else key, column) for tenant, key, column in rows]


def park(parked: Sequence[tuple[int, str, str]], *, now: datetime) -> None:
    """Stop planning schedules the planner refuses, each with the field and the reason
    (``(schedule id, field, reason)``): ``next_due_at`` cleared until the record is written
    again (sync, ``upsert_schedule``, enable). One statement."""
    if not parked:
        return
    _rows(
        f"""
        UPDATE {SCH} s SET next_due_at = NULL, parked_at = %(now)s, parked_field = t.field,
            parked_reason = t.reason
        FROM unnest(%(ids)s::bigint[], %(fields)s::text[], %(reasons)s::text[])
             AS t(id, field, reason)
        WHERE s.id = t.id
        """,
        {
            "now": ensure_aware_utc(now, name="now"),
            "ids": [p[0] for p in parked],
            "fields": [p[1] for p in parked],
            "reasons": [p[2] for p in parked],
        },
    )


def park_unplannable(
    *, now: datetime, jobs: Sequence[str], overdue: timedelta, replica: str, limit: int
) -> list[str]:
    """Park schedules due for longer than ``overdue`` whose job has no handler here
    (``jobs``): no replica planned them in that time, so none has one. A replica of a
    release that has the job takes them up again (``lock_schedules_to_plan``). Returns
    their names."""
    sql = f"""
        UPDATE {SCH} s SET next_due_at = NULL, parked_at = %(now)s, parked_field = 'job',
            parked_reason = 'job ' || quote_literal(s.job) || ' has no registered handler on '
                || 'replica ' || %(replica)s || ', and no replica planned the schedule for '
                || %(overdue)s || '; register the job (or correct the record), then any '
                || 'replica that has it plans the schedule again'
        WHERE s.id IN (
            SELECT id FROM {SCH}
            WHERE enabled AND status = 'active' AND next_due_at <= %(before)s
              AND NOT job = ANY(%(jobs)s::text[])
            ORDER BY next_due_at
            LIMIT %(limit)s
            FOR NO KEY UPDATE SKIP LOCKED
        )
        RETURNING s.tenant, s.key
    """
    now = ensure_aware_utc(now, name="now")
    rows = _rows(
        sql,
        {
            "now": now,
            "before": now - overdue,
            "jobs": list(jobs),
            "replica": replica,
            "overdue": f"{overdue.total_seconds():g} s",
            "limit": limit,
        },
    )
    return [f"{tenant}/{key}" if tenant else key for tenant, key in rows]


@dataclass(frozen=True)
class PlanningContext:
    """What the planner needs from the occurrence table about the schedules it plans."""

    missed: dict[int, list[datetime]]  # schedule id -> instants that never started, too late
    running: frozenset[int]  # schedules with an occurrence processing now


def planning_context(schedules: Sequence[Schedule], *, now: datetime) -> PlanningContext:
    """For every schedule of a plan pass, in one statement (the live-rows partial index):

    - its scheduled instants that never started and are now later than its ``max_delay`` (the
      planner applies the misfire policy to them);
    - whether one of its occurrences is processing now (asked only of overlap ``skip``
      schedules, the only policy that needs it).
    """
    if not schedules:
        return PlanningContext({}, frozenset())
    sql = f"""
        SELECT o.schedule_id, o.scheduled_at, o.state = 'processing'
        FROM unnest(%(ids)s::bigint[], %(tenants)s::text[], %(max_delays)s::interval[],
                    %(ask_running)s::bool[])
             AS t(id, tenant, max_delay, ask_running)
        JOIN {OCC} o ON o.schedule_id = t.id AND o.state IN ('scheduled', 'failed', 'processing')
        -- Only the schedule's own occurrences: one forged into another tenant is the claim's
        -- to refuse, never an instant the misfire policy decides.
        WHERE o.tenant = t.tenant AND {_loadable("o.scheduled_at", "timestamptz")}
          AND ((o.state = 'scheduled' AND o.trigger = 'schedule' AND o.attempts = 0
                AND o.scheduled_at < %(now)s - {_capped("t.max_delay")})
               OR (o.state = 'processing' AND t.ask_running))
        ORDER BY o.schedule_id, o.scheduled_at
    """
    rows = _rows(
        sql,
        {
            "ids": [s.pk for s in schedules],
            "tenants": [s.tenant for s in schedules],
            "max_delays": [s.max_delay for s in schedules],
            "ask_running": [s.overlap == "skip" for s in schedules],
            "now": ensure_aware_utc(now, name="now"),
        },
    )
    missed: dict[int, list[datetime]] = {}
    running: set[int] = set()
    for schedule_id, instant, processing in rows:
        if processing:
            running.add(schedule_id)
        else:
            missed.setdefault(schedule_id, []).append(instant.astimezone(UTC))
    return PlanningContext(missed, frozenset(running))


def missed_unstarted(schedule: Schedule, *, now: datetime) -> list[datetime]:
    """Scheduled instants of ``schedule`` that never started and are now later than its
    ``max_delay``: the planner applies the misfire policy to them."""
    return planning_context([schedule], now=now).missed.get(schedule.pk, [])


def mark_missed(
    schedule: Schedule,
    *,
    now: datetime,
    catch_up: Sequence[datetime],
    skip: Sequence[tuple[datetime, str]],
) -> None:
    """Decide already-planned missed occurrences: run late (trigger ``catchup``) or skip.

    Only occurrences still scheduled and never started change: a claim that won the race
    keeps its occurrence.
    """
    ids = [occurrence_id(schedule.tenant, schedule.key, i) for i in catch_up]
    skip_ids = [occurrence_id(schedule.tenant, schedule.key, i) for i, _ in skip]
    sql = f"""
        WITH caught AS (
            UPDATE {OCC} SET trigger = 'catchup'
            WHERE id = ANY(%(ids)s::uuid[]) AND state = 'scheduled' AND attempts = 0
        )
        UPDATE {OCC} o SET state = 'skipped', skip_reason = t.reason, finished_at = %(now)s
        FROM unnest(%(skip_ids)s::uuid[], %(reasons)s::text[]) AS t(id, reason)
        WHERE o.id = t.id AND o.state = 'scheduled' AND o.attempts = 0
    """
    _rows(
        sql,
        {"ids": ids, "skip_ids": skip_ids, "reasons": [r for _, r in skip], "now": now},
    )


def advance_schedule(
    schedule: Schedule, *, last_scheduled_at: datetime | None, next_due_at: datetime | None
) -> None:
    """Move a schedule's planning recovery point and its next due instant."""
    Schedule.objects.filter(pk=schedule.pk).update(
        last_scheduled_at=last_scheduled_at, next_due_at=next_due_at
    )


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
        target_type="schedule",
        target_id=str(schedule.pk),
        reason=f"{count} missed occurrences skipped by misfire policy {schedule.misfire}",
        after={"count": count, "first": first, "last": last},
    )


def lock_for_sync() -> None:
    """Serialise schedule syncs (every replica syncs at start) for the caller's transaction."""
    _rows("SELECT pg_advisory_xact_lock(hashtext('django_jobs.sync'))", {})
