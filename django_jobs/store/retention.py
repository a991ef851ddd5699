"""Retention: purging old occurrences by their schedule's Limit, retiring finished one-offs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import connection, transaction

from ..clock import ensure_aware_utc
from ._sql import _TERMINAL, ATT, AUDIT, CONSUMED, LIM, OCC, RUNBOOK, SCH, STEP, _rows


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
