"""Claims: taking due occurrences under a fresh lease, oldest first, with ``FOR UPDATE SKIP
LOCKED``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction

from ..clock import ensure_aware_utc
from ..models import Schedule
from ._sql import (
    _RUN_VALUES,
    ATT,
    OCC,
    SCH,
    TENANT_MISMATCH,
    WORKER_LOST,
    _all_loadable,
    _capped,
    _loadable,
    _named_rows,
    _not_paused,
    _restore_planner,
    _walk_the_due_index,
)
from .records import Claimed, Lease

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
