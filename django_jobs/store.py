"""The occurrence and lease store: the only code that writes occurrence and lease state.

One function per operation, each one SQL statement (one round trip). Every instant comes from
the caller's clock as a parameter; nothing here compares with PostgreSQL's ``now()``, which is
frozen for the length of a transaction.

Fencing: every claim of an occurrence increments its ``fencing_token``. Every write that ends
or extends a claim names the token it holds and changes nothing unless that token is still the
occurrence's current one and the owner matches. A refused write is recorded on its Attempt as
``fenced_out`` and reported to the caller.

Each function runs on Django's default connection inside whatever transaction the caller holds
(autocommit otherwise), so a service can combine a store write with its audit record.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import DateField, DateTimeField, DurationField

from . import audit
from .clock import ensure_aware_utc
from .identity import occurrence_id
from .models import AttemptOutcome, Schedule, SkipReason, Trigger
from .safe_error import SafeError

OCC = "django_jobs_occurrence"
ATT = "django_jobs_attempt"
SCH = "django_jobs_schedule"
LIM = "django_jobs_limit"
STEP = "django_jobs_step"
RUNBOOK = "django_jobs_runbook"
AUDIT = "django_jobs_auditrecord"
CONSUMED = "django_jobs_consumedoneoff"

_TERMINAL = ("completed", "dead", "skipped", "cancelled")

# ``last_error_type`` of an occurrence whose lost attempts used up its ``max_attempts``.
WORKER_LOST = "WorkerLost"
# ``last_error_type`` of an occurrence whose tenant is not its schedule's (never run).
TENANT_MISMATCH = "TenantMismatch"


@dataclass(frozen=True)
class PlannedOccurrence:
    """An occurrence to plan. With a ``skip_reason`` it is recorded as skipped, never run."""

    schedule_id: int
    tenant: str
    schedule_key: str
    scheduled_at: datetime
    skip_reason: SkipReason | None = None
    trigger: Trigger = Trigger.SCHEDULE

    @property
    def id(self) -> UUID:
        return occurrence_id(self.tenant, self.schedule_key, self.scheduled_at)


@dataclass(frozen=True)
class Lease:
    """A worker's claim on one occurrence: valid while ``token`` is the occurrence's current one."""

    occurrence_id: UUID
    token: int
    owner: str
    expires_at: datetime
    schedule_id: int
    tenant: str
    scheduled_at: datetime
    attempt: int
    trigger: str
    failures: int = 0  # failed attempts before this one


@dataclass
class Claimed:
    """What one claim took: runs to start, occurrences a lost attempt dead-lettered, and
    forged ones it refused."""

    runs: list[tuple[Lease, Schedule]] = field(default_factory=list)
    dead: list[UUID] = field(default_factory=list)
    # Occurrences whose tenant is not their schedule's: refused (dead, ``TenantMismatch``).
    forged: list[UUID] = field(default_factory=list)

    def __iter__(self) -> Iterator[tuple[Lease, Schedule]]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)


@dataclass(frozen=True)
class WriteResult:
    """Which leases a fenced write applied to, and which it refused as stale."""

    accepted: frozenset[UUID]
    refused: frozenset[UUID]


def _lease_arrays(leases: Sequence[Lease]) -> dict[str, list[Any]]:
    """The identities and tokens of ``leases`` as the parallel arrays a fenced statement
    unnests."""
    return {
        "ids": [lease.occurrence_id for lease in leases],
        "tokens": [lease.token for lease in leases],
    }


def _rows(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


def _named_rows(sql: str, params: dict[str, Any]) -> list[Any]:
    """Rows as named tuples, their fields named by the statement's column names."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = namedtuple("row", [column.name for column in cursor.description])  # type: ignore[misc]
        return [row(*values) for values in cursor.fetchall()]


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


def _not_paused(tenant: str, key: str) -> str:
    """SQL: the schedule is not named by the kill switch ``%(excluded)s`` (conf.py): a bare
    key in any tenant, ``'<tenant>/<key>'`` or ``'<tenant>/*'``. (``"*"`` is the caller's:
    nothing is planned or claimed then.)"""
    return f"""NOT ({key} = ANY(%(excluded)s::text[])
                OR {tenant} || '/' || {key} = ANY(%(excluded)s::text[])
                OR {tenant} || '/*' = ANY(%(excluded)s::text[]))"""


# Values PostgreSQL stores and Python cannot hold, so psycopg refuses to load them: an interval
# beyond timedelta's 999,999,999 days, an instant before year 1 or after 9999 ('infinity'). A
# row holding one is written behind django_jobs' back; statements that load rows leave it out
# (and the planner parks it, ``park_unreadable``), so it cannot fail every pass of every
# replica.
# Under a billion days: psycopg loads up to 999,999,999 days, counting a year as 365 days where
# extract(epoch ...) counts 365.25, so this bound never admits what psycopg refuses.
_PY_SECONDS = 86_400_000_000_000


def _loadable(column: str, kind: str) -> str:
    """SQL: ``column`` (of type ``kind``: interval, timestamptz or date) is NULL or loadable."""
    if kind == "interval":
        return f"({column} IS NULL OR abs(extract(epoch FROM {column})) < {_PY_SECONDS})"
    if kind == "timestamptz":
        bounds = "'0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00'"
    else:
        bounds = "'0001-01-01' AND '9999-12-31'"
    return f"({column} IS NULL OR {column} BETWEEN {bounds})"


def _sql_kind(field: Any) -> str | None:
    if isinstance(field, DurationField):
        return "interval"
    if isinstance(field, DateTimeField):
        return "timestamptz"
    if isinstance(field, DateField):
        return "date"
    return None


# (column, kind) of every Schedule column whose value Python may fail to hold.
_SCHEDULE_VALUES: list[tuple[str, str]] = [
    (str(f.column), kind)
    for f in Schedule._meta.concrete_fields
    if (kind := _sql_kind(f)) is not None
]
# Those the claim loads (RUN_FIELDS) or computes with.
_RUN_VALUES = [
    (c, k) for c, k in _SCHEDULE_VALUES if c in {"timeout", "backoff", "max_backoff", "max_delay"}
]


def _capped(max_delay: str) -> str:
    """SQL: ``max_delay`` within 0 and 100,000 days, so that an instant minus it never leaves
    the calendar (a row's value may be anything): a longer one never makes a run missed."""
    return f"GREATEST(LEAST({max_delay}, interval '100000 days'), interval '0')"


def _all_loadable(alias: str, values: Sequence[tuple[str, str]]) -> str:
    return " AND ".join(_loadable(f"{alias}.{c}", k) for c, k in values)


# The costs of disabled plan types would also push the statement past ``jit_above_cost``,
# and compiling it takes half a second: JIT goes off with them.
_ORDERED_WALK = ("enable_sort", "enable_bitmapscan", "enable_seqscan", "jit")


def _walk_the_due_index() -> list[str]:
    """Turn off, for the rest of the transaction, the plans that read every due row; return
    the settings they had (the target list is evaluated left to right)."""
    reads = ", ".join(f"current_setting('{name}')" for name in _ORDERED_WALK)
    sets = ", ".join(f"set_config('{name}', 'off', true)" for name in _ORDERED_WALK)
    return list(_rows(f"SELECT {reads}, {sets}", {})[0][: len(_ORDERED_WALK)])


def _restore_planner(previous: list[str]) -> None:
    sets = ", ".join(
        f"set_config('{name}', %(p{n})s, true)" for n, name in enumerate(_ORDERED_WALK)
    )
    _rows(f"SELECT {sets}", {f"p{n}": value for n, value in enumerate(previous)})


# The schedule fields a run reads (the handler's name, timeout, retry policy, and the key and
# tenant that name it): returned by the claim itself, so a claim costs no second query.
# In the model's field order, as ``Model.from_db`` reads values.
RUN_FIELDS = tuple(
    f.attname
    for f in Schedule._meta.concrete_fields
    if f.attname in {"tenant", "key", "job", "timeout", "max_attempts", "backoff", "max_backoff"}
)


def claim(
    *,
    owner: str,
    now: datetime,
    lease_for: timedelta,
    limit: int,
    tenant: str | None = None,
    exclude_keys: Sequence[str] = (),
    start_now: int | None = None,
) -> list[Lease]:
    """Take up to ``limit`` due occurrences for ``owner``; return their leases, oldest first.

    See ``claim_runs``, which also returns each occurrence's schedule.
    """
    runs = claim_runs(
        owner=owner,
        now=now,
        lease_for=lease_for,
        limit=limit,
        tenant=tenant,
        exclude_keys=exclude_keys,
        start_now=start_now,
    )
    return [lease for lease, _ in runs]


def claim_runs(
    *,
    owner: str,
    now: datetime,
    lease_for: timedelta,
    limit: int,
    tenant: str | None = None,
    exclude_keys: Sequence[str] = (),
    start_now: int | None = None,
) -> Claimed:
    """Take up to ``limit`` due occurrences for ``owner``; return their leases, oldest first,
    each with its schedule (the ``RUN_FIELDS`` loaded).

    Due means: scheduled or waiting for a retry with ``due_at <= now``, or processing with a
    lease that expired at or before ``now``. The first ``start_now`` (default: all) start at
    once; the rest are claimed ahead of a free run thread, their Attempts ``claimed`` until
    ``mark_started``. Steps, in one statement:

    1. pick due rows of enabled, active schedules ``FOR UPDATE SKIP LOCKED``, so concurrent
       claimers never wait for, nor take, each other's rows;
    2. a taken-over lease whose attempt had started is a lost attempt and counts as a failure,
       so a job that kills its worker is bounded by its retries: when that uses up the
       schedule's ``max_attempts`` the occurrence goes ``dead`` (``WorkerLost``) instead of
       running again. An attempt claimed ahead and never started costs nothing;
    3. set owner and expiry, increment the fencing token and the attempt count;
    4. end the Attempt of a taken-over lease: ``lease_lost``, or ``unstarted``;
    5. insert one Attempt per claim, carrying the new token;
    6. advance the schedules' ``last_started_at``, and for overlap ``skip``/``queue``
       schedules record the claimed occurrence as the one running.

    A missed scheduled run is left for the planner's misfire decision, and a schedule whose
    overlap policy is not ``allow`` gets at most one processing occurrence. An occurrence
    whose tenant is not its schedule's (a row written behind the store's back) is never run:
    it goes ``dead`` (``TenantMismatch``) and is returned in ``Claimed.forged``.
    """
    now = ensure_aware_utc(now, name="now")
    expires = now + lease_for
    sql = f"""
        WITH due AS (
            SELECT o.id, o.due_at, o.schedule_id, s.overlap, s.max_attempts,
                   o.tenant <> s.tenant AS forged,
                   -- A lapsed lease whose attempt had started: a lost attempt.
                   CASE WHEN o.state = 'processing' THEN EXISTS (
                       SELECT 1 FROM {ATT} a WHERE a.occurrence_id = o.id
                         AND a.fencing_token = o.fencing_token AND a.outcome = 'running')
                   ELSE false END AS lapsed
            FROM {OCC} o
            -- A lateral lookup the planner cannot turn into a hash join: the claim walks the
            -- due index in order and stops after ``limit`` rows, however many are due and
            -- however stale the table's statistics (a burst has just inserted them).
            CROSS JOIN LATERAL (
                SELECT id, enabled, status, tenant, key, max_delay, overlap, max_attempts,
                       timeout, backoff, max_backoff
                FROM {SCH}
                WHERE id = o.schedule_id OFFSET 0
            ) s
            WHERE o.state IN ('scheduled', 'failed', 'processing')
              AND o.due_at <= %(now)s
              AND s.enabled AND s.status = 'active'
              -- Values a claim could not load (see _loadable): never claimed.
              AND {_all_loadable("s", _RUN_VALUES)}
              AND {_loadable("o.due_at", "timestamptz")}
              AND {_loadable("o.scheduled_at", "timestamptz")}
              AND (%(tenant)s::text IS NULL OR o.tenant = %(tenant)s::text)
              -- The kill switch, by the schedule's tenant and key.
              AND {_not_paused("s.tenant", "s.key")}
              -- A run missed before it ever started waits for the planner to apply the
              -- misfire policy. One that started and was released on shutdown is resumed.
              -- (A forged one is refused all the same: no planner decides it.)
              AND (o.tenant <> s.tenant
                   OR NOT (o.state = 'scheduled' AND o.trigger = 'schedule' AND o.attempts = 0
                           AND o.scheduled_at < %(now)s - {_capped("s.max_delay")}))
              -- Overlap skip/queue: one processing occurrence per schedule at a time. The
              -- schedule row is locked (SKIP LOCKED) and its running_occurrence re-checked on
              -- its latest version, so two claimers can never both start a run of it.
              AND (s.overlap = 'allow' OR EXISTS (
                    SELECT 1 FROM {SCH} g
                    WHERE g.id = s.id
                      AND (g.running_occurrence IS NULL OR g.running_occurrence = o.id
                           OR NOT EXISTS (SELECT 1 FROM {OCC} r
                                          WHERE r.id = g.running_occurrence
                                            AND r.state = 'processing'))
                    FOR NO KEY UPDATE SKIP LOCKED))
            ORDER BY o.due_at
            LIMIT %(limit)s
            FOR UPDATE OF o SKIP LOCKED
        ),
        picked AS (
            SELECT ranked.*, row_number() OVER (ORDER BY due_at, id) AS place FROM (
                SELECT due.*, row_number() OVER (
                    PARTITION BY schedule_id ORDER BY due_at, id) AS nth
                FROM due
            ) ranked
            WHERE overlap = 'allow' OR nth = 1
        ),
        -- An occurrence whose tenant is not its schedule's was written behind the store's
        -- back: never run under either tenant's name; dead, saying why.
        forged AS (
            UPDATE {OCC} o SET
                state = 'dead', finished_at = %(now)s, lease_owner = '',
                lease_expires_at = NULL, last_error_type = '{TENANT_MISMATCH}',
                last_error_message = 'refused: the occurrence names tenant '
                    || quote_literal(o.tenant) || ' but its schedule belongs to tenant '
                    || quote_literal(s.tenant)
                    || '; it was not written by django_jobs and is not run'
            FROM picked p, {SCH} s
            WHERE o.id = p.id AND p.forged AND s.id = p.schedule_id
            RETURNING o.id
        ),
        exhausted AS (
            UPDATE {OCC} o SET
                state = 'dead', finished_at = %(now)s, failures = o.failures + 1,
                lease_owner = '', lease_expires_at = NULL,
                last_error_type = '{WORKER_LOST}',
                last_error_message = 'attempt ' || o.attempts || ' ended without an outcome: '
                    || 'the worker running it stopped (killed, crashed, or paused or cut off '
                    || 'past its lease) before recording one; that used up max_attempts ('
                    || p.max_attempts || '), so it is not run again'
            FROM picked p
            WHERE o.id = p.id AND NOT p.forged AND p.lapsed AND o.failures + 1 >= p.max_attempts
            RETURNING o.id
        ),
        claimed AS (
            UPDATE {OCC} o SET
                state = 'processing',
                lease_owner = %(owner)s,
                lease_expires_at = %(expires)s,
                due_at = %(expires)s,
                fencing_token = o.fencing_token + 1,
                attempts = o.attempts + 1,
                failures = o.failures + picked.lapsed::int,
                started_at = %(now)s
            FROM picked
            WHERE o.id = picked.id AND NOT picked.forged
              AND NOT (picked.lapsed AND o.failures + 1 >= picked.max_attempts)
            RETURNING o.id, o.fencing_token, o.schedule_id, o.tenant, o.scheduled_at,
                      o.attempts, o.trigger, o.failures, picked.due_at AS was_due,
                      picked.overlap, picked.place
        ),
        guarded AS (
            -- Rows locked by ``due``: no waiting here.
            UPDATE {SCH} s SET
                running_occurrence = c.id,
                last_started_at = GREATEST(s.last_started_at, %(now)s)
            FROM claimed c
            WHERE s.id = c.schedule_id AND c.overlap <> 'allow'
        ),
        -- Schedules that allow overlap are not locked by ``due``: their recovery point
        -- advances with SKIP LOCKED, so statements that each advance several schedules can
        -- never deadlock. A row locked at that moment is being advanced by another
        -- transaction to an instant a moment apart; the exact instants stay on the
        -- occurrence rows.
        progress AS (
            UPDATE {SCH} s SET last_started_at = %(now)s
            WHERE s.id IN (
                SELECT id FROM {SCH}
                WHERE id IN (SELECT schedule_id FROM claimed WHERE overlap = 'allow')
                  AND (last_started_at IS NULL OR last_started_at < %(now)s)
                FOR NO KEY UPDATE SKIP LOCKED
            )
        ),
        lost AS (
            UPDATE {ATT} a SET finished_at = %(now)s,
                outcome = CASE WHEN a.outcome = 'claimed' THEN 'unstarted' ELSE 'lease_lost' END
            FROM (SELECT id FROM claimed UNION ALL SELECT id FROM exhausted
                  UNION ALL SELECT id FROM forged) c
            WHERE a.occurrence_id = c.id AND a.outcome IN ('running', 'claimed')
        ),
        new_attempts AS (
            INSERT INTO {ATT} (occurrence_id, number, fencing_token, replica, trigger,
                               started_at, outcome, error_type, error_message)
            SELECT id, attempts, fencing_token, %(owner)s, trigger, %(now)s,
                   CASE WHEN %(start_now)s::int IS NULL OR place <= %(start_now)s::int
                        THEN 'running' ELSE 'claimed' END, '', ''
            FROM claimed
        )
        SELECT c.id, c.fencing_token AS token, c.schedule_id, c.tenant, c.scheduled_at,
               c.attempts, c.trigger, c.failures, c.was_due,
               {", ".join(f"s.{name} AS s_{name}" for name in RUN_FIELDS)}
        FROM claimed c JOIN {SCH} s ON s.id = c.schedule_id
        UNION ALL
        -- The occurrences a lost attempt dead-lettered, and forged ones: nothing to run.
        -- (Which of the two, in the trigger column.)
        SELECT id, NULL, NULL, NULL, NULL, NULL, why, NULL, NULL,
               {", ".join("NULL" for _ in RUN_FIELDS)}
        FROM (SELECT id, '{WORKER_LOST}' AS why FROM exhausted
              UNION ALL SELECT id, '{TENANT_MISMATCH}' FROM forged) ended
        ORDER BY was_due NULLS LAST, id
    """
    with transaction.atomic():
        # The due index walked in order, whatever the statistics say: right after a burst was
        # planned they still describe a near-empty table, and the planner would sort every
        # due row to return the first ``limit``. Settings local to this transaction.
        previous = _walk_the_due_index()
        rows = _named_rows(
            sql,
            {
                "now": now,
                "expires": expires,
                "owner": owner,
                "start_now": start_now,
                "limit": limit,
                "tenant": tenant,
                "excluded": list(exclude_keys),
            },
        )
        if len(connection.atomic_blocks) > 1:
            _restore_planner(previous)  # inside a caller's transaction: give them back
    claimed = Claimed()
    for r in rows:
        if r.token is None:
            (claimed.forged if r.trigger == TENANT_MISMATCH else claimed.dead).append(r.id)
            continue
        lease = Lease(
            occurrence_id=r.id,
            token=r.token,
            owner=owner,
            expires_at=expires,
            schedule_id=r.schedule_id,
            tenant=r.tenant,
            scheduled_at=r.scheduled_at.astimezone(UTC),
            attempt=r.attempts,
            trigger=r.trigger,
            failures=r.failures,
        )
        # The fields a run needs, read with the claim; any other field loads on access.
        values = [getattr(r, f"s_{name}") for name in RUN_FIELDS]
        schedule = Schedule.from_db(connection.alias, ["id", *RUN_FIELDS], [r.schedule_id, *values])
        claimed.runs.append((lease, schedule))
    return claimed


def renew(
    leases: Sequence[Lease], *, owner: str, now: datetime, lease_for: timedelta
) -> list[Lease]:
    """Extend the leases ``owner`` still holds; return them with their new expiry.

    A lease is still held while its token is the occurrence's current one and the occurrence
    is processing under ``owner``. A lease missing from the result is lost: the worker must
    stop that run at once.

    Never waits for a row lock: a row locked by another transaction (in practice the holder's
    own ``run.atomic()``, which no claim can take over while it holds the lock) is returned
    still held but not extended, and renewed by a later call. One statement.
    """
    if not leases:
        return []
    now = ensure_aware_utc(now, name="now")
    expires = now + lease_for
    held = f"""
        FROM {OCC} o JOIN unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)
            ON o.id = t.id
        WHERE o.fencing_token = t.token AND o.lease_owner = %(owner)s
          AND o.state = 'processing'
    """
    sql = f"""
        WITH free AS (SELECT o.id {held} FOR NO KEY UPDATE OF o SKIP LOCKED),
        renewed AS (
            UPDATE {OCC} o SET lease_expires_at = %(expires)s, due_at = %(expires)s
            FROM free WHERE o.id = free.id
            RETURNING o.id
        )
        SELECT id, true FROM renewed
        UNION ALL
        SELECT o.id, false {held} AND o.id NOT IN (SELECT id FROM free)
    """
    kept = dict(_rows(sql, {**_lease_arrays(leases), "owner": owner, "expires": expires}))
    return [
        Lease(**{**lease.__dict__, "expires_at": expires}) if kept[lease.occurrence_id] else lease
        for lease in leases
        if lease.occurrence_id in kept
    ]


def mark_started(lease: Lease, *, now: datetime) -> None:
    """A run claimed ahead has started: from now on a lapse of its lease is a lost attempt.

    Committed without waiting for the WAL flush (``synchronous_commit`` off for this one
    statement): it must outlive this worker process, which it does once committed; only a
    crash of PostgreSQL itself in the next moments could lose it, and then the attempt counts
    as unstarted.
    """
    sql = f"""
        UPDATE {ATT} SET outcome = 'running', started_at = %(now)s
        WHERE occurrence_id = %(id)s AND fencing_token = %(token)s AND outcome = 'claimed'
          AND set_config('synchronous_commit', 'off', true) IS NOT NULL
    """
    params = {"id": lease.occurrence_id, "token": lease.token}
    _rows(sql, {**params, "now": ensure_aware_utc(now, name="now")})


def hold(lease: Lease) -> bool:
    """Lock the occurrence for the rest of the caller's transaction, if ``lease`` is current.

    Used by ``Run.atomic()``: while the lock is held no other replica can claim, complete or
    fail the occurrence, so the handler's writes and the completion commit together or not
    at all. Returns ``False`` (and locks nothing) when the token is stale.
    """
    sql = f"""
        SELECT 1 FROM {OCC}
        WHERE id = %(id)s AND fencing_token = %(token)s
          AND lease_owner = %(owner)s AND state = 'processing'
        FOR UPDATE
    """
    params = {"id": lease.occurrence_id, "token": lease.token, "owner": lease.owner}
    return bool(_rows(sql, params))


def _fenced_write(
    leases: Sequence[Lease],
    *,
    now: datetime,
    set_sql: str,
    outcome: AttemptOutcome,
    params: dict[str, Any],
    completes: bool = False,
    skip_locked: bool = False,
) -> WriteResult:
    """Apply ``set_sql`` to the occurrences whose lease is current; record every attempt's end.

    Accepted leases get ``outcome`` on their Attempt; refused ones get ``fenced_out``. The
    schedule of an accepted occurrence that was its running one (overlap skip/queue) is free
    to start the next; with ``completes`` its ``last_completed_at`` advances too.
    """
    if not leases:
        return WriteResult(frozenset(), frozenset())
    owners = {lease.owner for lease in leases}
    if len(owners) != 1:
        raise ValueError("a fenced write takes leases of one owner")
    now = ensure_aware_utc(now, name="now")
    sql = f"""
        WITH input AS (
            SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)
        ),
        -- Rows another transaction has locked are skipped, never waited for: only a
        -- handler's own run.atomic() can hold one (claims skip rows they cannot lock).
        free AS (
            SELECT o.id FROM {OCC} o JOIN input ON o.id = input.id
            WHERE %(skip_locked)s FOR NO KEY UPDATE OF o SKIP LOCKED
        ),
        done AS (
            UPDATE {OCC} o SET {set_sql},
                lease_owner = '', lease_expires_at = NULL
            FROM input
            WHERE o.id = input.id AND o.fencing_token = input.token
              AND o.lease_owner = %(owner)s AND o.state = 'processing'
              AND (NOT %(skip_locked)s OR o.id IN (SELECT id FROM free))
            RETURNING o.id, o.schedule_id
        ),
        ended AS (
            UPDATE {ATT} a SET
                outcome = CASE WHEN a.occurrence_id IN (SELECT id FROM done)
                          THEN %(outcome)s ELSE 'fenced_out' END,
                finished_at = %(now)s,
                error_type = %(error_type)s,
                error_message = %(error_message)s
            FROM input
            WHERE a.occurrence_id = input.id AND a.fencing_token = input.token
              AND a.outcome IN ('running', 'claimed', 'lease_lost')
              AND (NOT %(skip_locked)s OR a.occurrence_id IN (SELECT id FROM free))
        ),
        ended_runs AS (
            UPDATE {SCH} s SET
                running_occurrence = NULL,
                last_completed_at = CASE WHEN %(completes)s
                    THEN GREATEST(s.last_completed_at, %(now)s) ELSE s.last_completed_at END
            FROM done
            WHERE s.id = done.schedule_id AND s.running_occurrence = done.id
        ),
        -- Other schedules' recovery point advances with SKIP LOCKED: statements that each
        -- advance several schedules can then never deadlock. A row locked at that moment is
        -- being advanced by another transaction to an instant a moment apart; the exact
        -- instants always stay on the occurrence rows.
        progress AS (
            UPDATE {SCH} s SET last_completed_at = %(now)s
            WHERE %(completes)s AND s.id IN (
                SELECT id FROM {SCH}
                WHERE id IN (SELECT schedule_id FROM done)
                  AND (running_occurrence IS NULL
                       OR running_occurrence NOT IN (SELECT id FROM done))
                  AND (last_completed_at IS NULL OR last_completed_at < %(now)s)
                FOR NO KEY UPDATE SKIP LOCKED
            )
        )
        SELECT id FROM done
    """
    done = {
        r[0]
        for r in _rows(
            sql,
            {
                **_lease_arrays(leases),
                "owner": owners.pop(),
                "now": now,
                "outcome": outcome.value,
                "error_type": "",
                "error_message": "",
                "completes": completes,
                "skip_locked": skip_locked,
                **params,
            },
        )
    }
    ids = {lease.occurrence_id for lease in leases}
    return WriteResult(accepted=frozenset(done), refused=frozenset(ids - done))


def complete(leases: Sequence[Lease], *, now: datetime) -> WriteResult:
    """Mark occurrences completed, each only while its lease's token is current."""
    return _fenced_write(
        leases,
        now=now,
        set_sql="state = 'completed', finished_at = %(now)s",
        outcome=AttemptOutcome.SUCCEEDED,
        params={},
        completes=True,
    )


def fail(
    lease: Lease,
    *,
    now: datetime,
    error: SafeError,
    retry_at: datetime | None,
    outcome: AttemptOutcome = AttemptOutcome.FAILED,
) -> bool:
    """Record a failed attempt: wait for a retry at ``retry_at``, or, with ``None``, dead-letter.

    Returns whether the write was accepted (``False``: the token was stale, nothing changed).
    """
    if retry_at is None:
        set_sql = "state = 'dead', finished_at = %(now)s"
    else:
        set_sql = "state = 'failed', due_at = %(retry_at)s, trigger = 'retry'"
    result = _fenced_write(
        [lease],
        now=now,
        set_sql=set_sql
        + ", failures = o.failures + 1"
        + ", last_error_type = %(error_type)s, last_error_message = %(error_message)s",
        outcome=outcome,
        params={
            "retry_at": ensure_aware_utc(retry_at, name="retry_at") if retry_at else None,
            "error_type": error.type,
            "error_message": error.message,
        },
    )
    return bool(result.accepted)


def dead_letter(
    lease: Lease,
    *,
    now: datetime,
    error: SafeError,
    outcome: AttemptOutcome = AttemptOutcome.FAILED,
) -> bool:
    """Move the occurrence to the dead state (poison) at once; see ``fail``."""
    return fail(lease, now=now, error=error, retry_at=None, outcome=outcome)


_GIVE_BACK = (
    "state = CASE WHEN o.trigger = 'retry' THEN 'failed' ELSE 'scheduled' END, due_at = %(now)s"
)


def release(
    leases: Sequence[Lease],
    *,
    now: datetime,
    outcome: AttemptOutcome = AttemptOutcome.RELEASED,
) -> WriteResult:
    """Give back unfinished work on graceful shutdown: claimable again at once by any replica.

    The released attempt is not counted as a failure. Never waits for a row lock: a row
    locked by a run's own ``run.atomic()`` (a handler that ignored cancellation) is skipped,
    neither accepted nor refused, and its lease left to expire. With ``outcome`` ``unstarted``
    (claimed ahead, never run) or ``outage``, the Attempt says so.
    """
    return _fenced_write(
        leases, now=now, set_sql=_GIVE_BACK, outcome=outcome, params={}, skip_locked=True
    )


def excuse_outage(lease: Lease, *, now: datetime) -> bool:
    """The store could not be reached while ``lease``'s attempt ran, and another claim took
    the occurrence over meanwhile, counting the attempt as lost: record it ``outage`` and give
    the failure back. An occurrence that lost attempt had dead-lettered (and that nothing
    claimed since) is due again at once. One statement; ``False`` if there was nothing to
    excuse (an attempt of another owner, or not one that counted).
    """
    sql = f"""
        WITH counted AS (
            SELECT a.id FROM {ATT} a
            WHERE a.occurrence_id = %(id)s AND a.fencing_token = %(token)s
              AND a.replica = %(owner)s AND a.outcome IN ('lease_lost', 'fenced_out')
            FOR UPDATE
        ),
        excused AS (
            UPDATE {ATT} a SET outcome = 'outage', finished_at = COALESCE(a.finished_at, %(now)s)
            FROM counted WHERE a.id = counted.id
            RETURNING a.id
        ),
        revived AS (
            SELECT o.id FROM {OCC} o
            WHERE o.id = %(id)s AND o.state = 'dead' AND o.fencing_token = %(token)s
              AND o.last_error_type = '{WORKER_LOST}' AND EXISTS (SELECT 1 FROM excused)
        )
        UPDATE {OCC} o SET
            failures = GREATEST(o.failures - 1, 0),
            state = CASE WHEN o.id IN (SELECT id FROM revived) THEN 'scheduled' ELSE o.state END,
            due_at = CASE WHEN o.id IN (SELECT id FROM revived) THEN %(now)s ELSE o.due_at END,
            finished_at = CASE WHEN o.id IN (SELECT id FROM revived) THEN NULL
                          ELSE o.finished_at END,
            last_error_type = CASE WHEN o.id IN (SELECT id FROM revived) THEN ''
                              ELSE o.last_error_type END,
            last_error_message = CASE WHEN o.id IN (SELECT id FROM revived) THEN ''
                                 ELSE o.last_error_message END
        WHERE o.id = %(id)s AND EXISTS (SELECT 1 FROM excused)
        RETURNING o.id
    """
    params = {"id": lease.occurrence_id, "token": lease.token, "owner": lease.owner}
    return bool(_rows(sql, {**params, "now": ensure_aware_utc(now, name="now")}))


def purge(*, now: datetime, batch_size: int) -> int:
    """Delete finished occurrences (with their attempts and steps) beyond each schedule's
    retention Limit.

    Works schedule by schedule, one batch per statement, so no statement holds many locks for
    long. Occurrences still scheduled, processing or failed are never purged. Returns the
    number of occurrences deleted.
    """
    now = ensure_aware_utc(now, name="now")
    deleted = 0
    for schedule_id in [r[0] for r in _rows(f"SELECT schedule_id FROM {LIM}", {})]:
        while True:
            count = purge_batch(schedule_id, now=now, batch_size=batch_size)
            deleted += count
            if count < batch_size:
                break
    return deleted


def purge_batch(schedule_id: int, *, now: datetime, batch_size: int) -> int:
    """Delete at most ``batch_size`` of one schedule's finished occurrences beyond its Limit,
    with their attempts and ``run.once`` steps, in one statement (all or nothing).

    The cutoff is the later of ``now - keep_for`` and the scheduled instant of the
    ``keep_last``-th newest occurrence; finished occurrences scheduled before it go.
    """
    sql = f"""
        WITH lim AS (SELECT keep_for, keep_last FROM {LIM} WHERE schedule_id = %(schedule)s),
        cutoff AS (
            SELECT GREATEST(
                -- A keep_for reaching before the earliest timestamp keeps everything (NULL)
                -- instead of failing the purge with "timestamp out of range".
                (SELECT CASE WHEN keep_for < %(now)s::timestamptz - '4713-01-01 00:00+00 BC'
                        THEN %(now)s::timestamptz - keep_for END FROM lim),
                -- OFFSET NULL means no offset, so a missing keep_last is guarded, and by a
                -- CASE, so that the subquery is not run at all then: a filter inside it
                -- would be checked row by row over the schedule's whole history.
                CASE WHEN (SELECT keep_last FROM lim) IS NOT NULL THEN
                    (SELECT o.scheduled_at FROM {OCC} o
                     WHERE o.schedule_id = %(schedule)s
                     ORDER BY o.scheduled_at DESC
                     OFFSET (SELECT keep_last - 1 FROM lim) LIMIT 1)
                END
            ) AS at
        ),
        doomed AS (
            SELECT o.id FROM {OCC} o, cutoff
            WHERE o.schedule_id = %(schedule)s
              AND o.scheduled_at < cutoff.at
              AND o.state IN {_TERMINAL}
            ORDER BY o.scheduled_at
            LIMIT %(batch)s
            FOR UPDATE OF o SKIP LOCKED
        ),
        gone_steps AS (
            DELETE FROM {STEP} WHERE occurrence_id IN (SELECT id FROM doomed)
        ),
        gone_attempts AS (
            DELETE FROM {ATT} WHERE occurrence_id IN (SELECT id FROM doomed)
        )
        DELETE FROM {OCC} WHERE id IN (SELECT id FROM doomed)
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, {"schedule": schedule_id, "now": now, "batch": batch_size})
        return int(cursor.rowcount)


def measure_clock_offset(local_now: datetime, local_after: datetime, db_now: datetime) -> timedelta:
    """The database clock minus this host's, from one round trip bracketed by local readings.

    Assumes the database read its clock half way through the round trip; the error is at most
    half the round trip.
    """
    midpoint = local_now + (local_after - local_now) / 2
    return ensure_aware_utc(db_now, name="db_now") - ensure_aware_utc(midpoint, name="local")


def database_clock() -> datetime:
    """PostgreSQL's wall clock right now (``clock_timestamp()``, not the frozen ``now()``)."""
    return _rows("SELECT clock_timestamp()", {})[0][0].astimezone(UTC)  # type: ignore[no-any-return]


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


# --- Steps of run.once(), replicas, wake-ups ----------------------------------------------


def step_done(occurrence: UUID, name: str) -> bool:
    """Whether ``run.once(name)`` already happened for this occurrence (any attempt)."""
    sql = f"SELECT EXISTS (SELECT 1 FROM {STEP} WHERE occurrence_id = %(o)s AND name = %(n)s)"
    return bool(_rows(sql, {"o": occurrence, "n": name})[0][0])


def record_step(lease: Lease, name: str, *, now: datetime) -> bool:
    """Record that step ``name`` happened, only while ``lease`` is current. One statement.

    Returns ``False`` when the token is stale (nothing recorded) or the step was recorded
    already.
    """
    sql = f"""
        INSERT INTO {STEP} (occurrence_id, name, fencing_token, done_at)
        SELECT o.id, %(name)s, o.fencing_token, %(now)s FROM {OCC} o
        WHERE o.id = %(id)s AND o.fencing_token = %(token)s
          AND o.lease_owner = %(owner)s AND o.state = 'processing'
        ON CONFLICT (occurrence_id, name) DO NOTHING
        RETURNING id
    """
    params = {
        "id": lease.occurrence_id,
        "token": lease.token,
        "owner": lease.owner,
        "name": name,
        "now": ensure_aware_utc(now, name="now"),
    }
    return bool(_rows(sql, params))


def heartbeat(
    replica_id: str,
    *,
    host: str,
    pid: int,
    started_at: datetime,
    now: datetime,
    state: str,
    concurrency: int,
    running: int,
) -> None:
    """Register or refresh this replica's row (one upsert)."""
    sql = """
        INSERT INTO django_jobs_replica
            (id, host, pid, started_at, heartbeat_at, state, concurrency, running)
        VALUES (%(id)s, %(host)s, %(pid)s, %(started)s, %(now)s, %(state)s, %(conc)s, %(running)s)
        ON CONFLICT (id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at,
            state = EXCLUDED.state, running = EXCLUDED.running
    """
    _rows(
        sql,
        {
            "id": replica_id,
            "host": host,
            "pid": pid,
            "started": started_at,
            "now": now,
            "state": state,
            "conc": concurrency,
            "running": running,
        },
    )


def next_wakeup(
    *, now: datetime, exclude_keys: Sequence[str] = (), jobs: Sequence[str] | None = None
) -> datetime | None:
    """The earliest instant at which planning or claiming has work: a schedule's next due
    instant or a claimable occurrence's ``due_at``. Two index lookups. What this replica would
    not plan or claim (the kill switch ``exclude_keys``; with ``jobs``, schedules of other
    jobs) is left out: a replica never wakes for work it then leaves."""
    sql = f"""
        SELECT LEAST(
            ({_NEXT_SCHEDULE}),
            (SELECT min(o.due_at) FROM {OCC} o
             WHERE o.state IN ('scheduled', 'failed', 'processing')
               AND {_loadable("o.due_at", "timestamptz")}
               AND (cardinality(%(excluded)s::text[]) = 0 OR EXISTS (
                    SELECT 1 FROM {SCH} s WHERE s.id = o.schedule_id
                      AND {_not_paused("s.tenant", "s.key")})))
        )
    """
    value = _rows(sql, _next_params(exclude_keys, jobs))[0][0]
    return value.astimezone(UTC) if value is not None else None


_NEXT_SCHEDULE = f"""
    SELECT min(s.next_due_at) FROM {SCH} s WHERE s.enabled AND s.status = 'active'
      AND {_loadable("s.next_due_at", "timestamptz")}
      AND (cardinality(%(excluded)s::text[]) = 0 OR {_not_paused("s.tenant", "s.key")})
      AND (%(jobs)s::text[] IS NULL OR s.job = ANY(%(jobs)s::text[]))
"""


def _next_params(exclude_keys: Sequence[str], jobs: Sequence[str] | None) -> dict[str, Any]:
    return {"excluded": list(exclude_keys), "jobs": None if jobs is None else list(jobs)}


def next_schedule_due(
    *, exclude_keys: Sequence[str] = (), jobs: Sequence[str] | None = None
) -> datetime | None:
    """The earliest ``next_due_at`` of an active, enabled schedule this replica would plan
    (see ``next_wakeup``); one index lookup."""
    value = _rows(_NEXT_SCHEDULE, _next_params(exclude_keys, jobs))[0][0]
    return value.astimezone(UTC) if value is not None else None


CHANNEL = "django_jobs"


def notify(reason: str) -> None:
    """Wake every listening replica (delivered when the caller's transaction commits)."""
    _rows("SELECT pg_notify(%(channel)s, %(reason)s)", {"channel": CHANNEL, "reason": reason})


# --- Operator actions (called by django_jobs.services, inside its transaction) ------------


def replay(occurrence: UUID, *, schedule_id: int, tenant: str, now: datetime) -> bool:
    """Make a finished occurrence due again now, as a manual trigger: its next claim is a new
    attempt (number N+1) of the same occurrence, with the same identity and scheduled instant.
    The retry budget starts afresh. Refused (``False``) while it is scheduled or processing,
    and unless it is an occurrence of ``schedule_id`` in ``tenant``: the service checked the
    permission on that schedule, so the write may touch nothing else."""
    sql = f"""
        UPDATE {OCC} SET state = 'scheduled', due_at = %(now)s, trigger = 'manual',
            skip_reason = '', finished_at = NULL, failures = 0
        WHERE id = %(id)s AND schedule_id = %(schedule)s AND tenant = %(tenant)s
          AND state IN ('dead', 'failed', 'skipped', 'completed', 'cancelled')
        RETURNING id
    """
    params = {
        "id": occurrence,
        "schedule": schedule_id,
        "tenant": tenant,
        "now": ensure_aware_utc(now, name="now"),
    }
    return bool(_rows(sql, params))


def cancel_running(schedule_id: int, *, tenant: str, now: datetime) -> list[UUID]:
    """Cancel the schedule's processing occurrences: their leases end here, so the replicas
    running them find renewal refused and stop; their attempts are recorded cancelled. Only
    occurrences of ``schedule_id`` in ``tenant`` (the schedule the service checked)."""
    sql = f"""
        WITH gone AS (
            UPDATE {OCC} SET state = 'cancelled', finished_at = %(now)s,
                lease_owner = '', lease_expires_at = NULL
            WHERE schedule_id = %(schedule)s AND tenant = %(tenant)s AND state = 'processing'
            RETURNING id, fencing_token
        ),
        ended AS (
            UPDATE {ATT} a SET outcome = 'cancelled', finished_at = %(now)s
            FROM gone WHERE a.occurrence_id = gone.id AND a.fencing_token = gone.fencing_token
              AND a.outcome = 'running'
        ),
        freed AS (
            UPDATE {SCH} SET running_occurrence = NULL
            WHERE id = %(schedule)s AND tenant = %(tenant)s
              AND running_occurrence IN (SELECT id FROM gone)
        )
        SELECT id FROM gone
    """
    params = {"schedule": schedule_id, "tenant": tenant, "now": ensure_aware_utc(now, name="now")}
    rows = _rows(sql, params)
    return [r[0] for r in rows]


# --- Automatic retention (django_jobs/worker/retention.py) ---------------------------------

_RETENTION_LOCK = "hashtext('django_jobs.retention')"
_ONE_OFF = "('at', 'after')"


def try_retention_lock() -> bool:
    """Take the fleet's retention lock for this session (connection), if no one holds it.

    A session-level advisory lock: it outlives the pass's many short transactions and goes
    with the connection if the replica dies.
    """
    return bool(_rows(f"SELECT pg_try_advisory_lock({_RETENTION_LOCK})", {})[0][0])


def release_retention_lock() -> None:
    _rows(f"SELECT pg_advisory_unlock({_RETENTION_LOCK})", {})


def schedules_with_limits(*, after: int, limit: int) -> list[int]:
    """Ids of schedules that have a retention Limit, after ``after``, in id order (a page)."""
    sql = f"""
        SELECT schedule_id FROM {LIM} WHERE schedule_id > %(after)s
        ORDER BY schedule_id LIMIT %(limit)s
    """
    return [r[0] for r in _rows(sql, {"after": after, "limit": limit})]


def retire_one_offs(*, now: datetime) -> list[tuple[int, str, str]]:
    """Retire every active one-off (``at``/``after``) schedule whose occurrences are all final,
    in one statement: status ``retired``, ``retired_at``, an audit record each, and for a
    declared one a ``ConsumedOneOff`` row so that sync does not create it again. Returns
    (id, tenant, key) of each."""
    sql = f"""
        WITH done AS (
            SELECT s.id FROM {SCH} s
            WHERE s.timing_kind IN {_ONE_OFF} AND s.status = 'active'
              AND EXISTS (SELECT 1 FROM {OCC} o WHERE o.schedule_id = s.id
                          AND o.state IN {_TERMINAL})
              AND NOT EXISTS (SELECT 1 FROM {OCC} o WHERE o.schedule_id = s.id
                              AND o.state IN ('scheduled', 'failed', 'processing'))
            FOR NO KEY UPDATE OF s SKIP LOCKED
        ),
        retired AS (
            UPDATE {SCH} s SET status = 'retired', retired_at = %(now)s, updated_at = %(now)s
            FROM done WHERE s.id = done.id
            RETURNING s.id, s.tenant, s.key, s.origin, s.timing_kind, s.run_at, s.delay
        ),
        consumed AS (
            INSERT INTO {CONSUMED} (tenant, key, timing_kind, run_at, delay, consumed_at)
            SELECT tenant, key, timing_kind,
                   CASE WHEN timing_kind = 'at' THEN run_at END,
                   CASE WHEN timing_kind = 'after' THEN delay END, %(now)s
            FROM retired WHERE origin = 'code'
            ON CONFLICT DO NOTHING
        ),
        audited AS (
            INSERT INTO {AUDIT} (at, actor, action, tenant, schedule_id, target_type,
                                 target_id, reason, before, after)
            SELECT %(now)s, 'django_jobs.retention', 'schedule.retired', tenant, id,
                   'schedule', id::text, 'a one-off whose occurrence is final',
                   '{{"status": "active"}}', '{{"status": "retired"}}'
            FROM retired
        )
        SELECT id, tenant, key FROM retired ORDER BY id
    """
    return [tuple(r) for r in _rows(sql, {"now": ensure_aware_utc(now, name="now")})]


def remove_retired_one_offs(
    *, now: datetime, keep_without_duration: timedelta, batch_size: int
) -> list[tuple[int, str, str]]:
    """Delete up to ``batch_size`` retired one-off schedules whose retention has passed since
    they retired (their Limit's ``keep_for``, or ``keep_without_duration`` when the Limit
    only counts), with every row of theirs: occurrences, attempts, steps, Limit, runbooks.
    One transaction: the schedules are picked and locked first (a cheap read of the schedule
    table, usually empty), then deleted with all their rows in one statement; each removal
    leaves an audit record. Returns (id, tenant, key) of each."""
    pick = f"""
        SELECT s.id FROM {SCH} s LEFT JOIN {LIM} l ON l.schedule_id = s.id
        WHERE s.timing_kind IN {_ONE_OFF} AND s.status = 'retired'
          AND s.retired_at IS NOT NULL
          AND %(now)s::timestamptz - s.retired_at > COALESCE(l.keep_for, %(keep)s)
          AND NOT EXISTS (SELECT 1 FROM {OCC} o WHERE o.schedule_id = s.id
                          AND o.state IN ('scheduled', 'failed', 'processing'))
        ORDER BY s.id
        LIMIT %(batch)s
        FOR UPDATE OF s SKIP LOCKED
    """
    # By the id array, each delete walks the (schedule, scheduled_at) index: a plan whose cost
    # does not grow with the occurrence table (a join here cost a JIT compile at 10M rows).
    remove = f"""
        WITH occurrences AS (
            SELECT o.id FROM {OCC} o WHERE o.schedule_id = ANY(%(ids)s::bigint[])
        ),
        steps AS (DELETE FROM {STEP} WHERE occurrence_id IN (SELECT id FROM occurrences)),
        attempts AS (DELETE FROM {ATT} WHERE occurrence_id IN (SELECT id FROM occurrences)),
        occ AS (DELETE FROM {OCC} WHERE id IN (SELECT id FROM occurrences)),
        limits AS (DELETE FROM {LIM} WHERE schedule_id = ANY(%(ids)s::bigint[])),
        books AS (DELETE FROM {RUNBOOK} WHERE schedule_id = ANY(%(ids)s::bigint[])),
        removed AS (
            DELETE FROM {SCH} WHERE id = ANY(%(ids)s::bigint[]) RETURNING id, tenant, key
        ),
        audited AS (
            INSERT INTO {AUDIT} (at, actor, action, tenant, schedule_id, target_type,
                                 target_id, reason, before, after)
            SELECT %(now)s, 'django_jobs.retention', 'schedule.removed', tenant, id,
                   'schedule', id::text, 'a retired one-off past its retention', '{{}}',
                   jsonb_build_object('key', key)
            FROM removed
        )
        SELECT id, tenant, key FROM removed ORDER BY id
    """
    now = ensure_aware_utc(now, name="now")
    with transaction.atomic():
        params = {"now": now, "keep": keep_without_duration, "batch": batch_size}
        ids = [r[0] for r in _rows(pick, params)]
        if not ids:
            return []
        return [tuple(r) for r in _rows(remove, {"now": now, "ids": ids})]


def consumed_one_offs() -> set[tuple[str, str, str, datetime | None, timedelta | None]]:
    """Every consumed declared one-off: (tenant, key, timing kind, run_at, delay)."""
    sql = f"SELECT tenant, key, timing_kind, run_at, delay FROM {CONSUMED}"
    return {
        (t, k, kind, at.astimezone(UTC) if at else None, delay)
        for t, k, kind, at, delay in _rows(sql, {})
    }


def record_retention(
    *,
    replica: str,
    started_at: datetime,
    finished_at: datetime,
    deleted: int,
    retired: int,
    removed: int,
    seconds: float,
    caught_up: bool,
) -> None:
    """Record what a retention pass did (the one ``RetentionState`` row, one upsert)."""
    sql = """
        INSERT INTO django_jobs_retentionstate AS r (id, replica, started_at, finished_at,
            deleted, retired, removed, seconds, caught_up, caught_up_at)
        VALUES (1, %(replica)s, %(started)s, %(finished)s, %(deleted)s, %(retired)s,
                %(removed)s, %(seconds)s, %(caught_up)s,
                CASE WHEN %(caught_up)s THEN %(finished)s::timestamptz END)
        ON CONFLICT (id) DO UPDATE SET replica = EXCLUDED.replica,
            started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at,
            deleted = EXCLUDED.deleted, retired = EXCLUDED.retired,
            removed = EXCLUDED.removed, seconds = EXCLUDED.seconds,
            caught_up = EXCLUDED.caught_up,
            caught_up_at = COALESCE(EXCLUDED.caught_up_at, r.caught_up_at)
    """
    _rows(
        sql,
        {
            "replica": replica,
            "started": ensure_aware_utc(started_at, name="started_at"),
            "finished": ensure_aware_utc(finished_at, name="finished_at"),
            "deleted": deleted,
            "retired": retired,
            "removed": removed,
            "seconds": seconds,
            "caught_up": caught_up,
        },
    )
