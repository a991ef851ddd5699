-- Retention: finished occurrences purged by their schedule's Limit, one-offs retired and, once
-- their own retention has passed, removed. Fragments: {terminal_states} and
-- {unfinished_states} (placeholders of those states).

-- name: purge_page
-- At most %(batch)s finished occurrences of a page of schedules beyond their Limits, oldest
-- first within each schedule, with their attempts and steps, all or nothing. A schedule's
-- cutoff is the later of now - keep_for and the scheduled instant of its keep_last-th newest
-- occurrence; finished occurrences scheduled before it go. A keep_for reaching before the
-- earliest timestamp keeps everything (NULL) instead of failing with "timestamp out of
-- range"; a missing keep_last is guarded by a CASE (OFFSET NULL means no offset, and a
-- filter inside the subquery would be checked row by row over the schedule's history).
WITH cutoff AS (
    SELECT l.schedule_id, GREATEST(
        CASE WHEN l.keep_for < %(now)s::timestamptz - '4713-01-01 00:00+00 BC'
             THEN %(now)s::timestamptz - l.keep_for END,
        CASE WHEN l.keep_last IS NOT NULL THEN
            (SELECT o.scheduled_at FROM {occurrence} o
             WHERE o.schedule_id = l.schedule_id
             ORDER BY o.scheduled_at DESC
             OFFSET l.keep_last - 1 LIMIT 1)
        END
    ) AS at
    FROM {limit} l
    WHERE l.schedule_id = ANY(%(schedules)s::bigint[])
),
doomed AS (
    SELECT d.id FROM cutoff c
    CROSS JOIN LATERAL (
        SELECT o.id FROM {occurrence} o
        WHERE o.schedule_id = c.schedule_id
          AND o.scheduled_at < c.at
          AND o.state IN ({terminal_states})
        ORDER BY o.scheduled_at
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    ) d
    WHERE c.at IS NOT NULL
    LIMIT %(batch)s
),
gone_steps AS (
    DELETE FROM {step} WHERE occurrence_id IN (SELECT id FROM doomed)
),
gone_attempts AS (
    DELETE FROM {attempt} WHERE occurrence_id IN (SELECT id FROM doomed)
)
DELETE FROM {occurrence} WHERE id IN (SELECT id FROM doomed)

-- name: try_retention_lock
SELECT pg_try_advisory_lock(hashtext('django_jobs.retention')) AS taken

-- name: release_retention_lock
SELECT pg_advisory_unlock(hashtext('django_jobs.retention'))

-- name: schedules_with_limits
SELECT schedule_id FROM {limit} WHERE schedule_id > %(after)s
ORDER BY schedule_id LIMIT %(limit)s

-- name: retire_one_offs
-- A one-off is done when it has a final occurrence and no unfinished one. A declared one
-- leaves a ConsumedOneOff row, so that sync does not create it again.
WITH done AS (
    SELECT s.id FROM {schedule} s
    WHERE s.timing_kind IN (%(timing_at)s, %(timing_after)s) AND s.status = %(status_active)s
      AND EXISTS (SELECT 1 FROM {occurrence} o WHERE o.schedule_id = s.id
                  AND o.state IN ({terminal_states}))
      AND NOT EXISTS (SELECT 1 FROM {occurrence} o WHERE o.schedule_id = s.id
                      AND o.state IN ({unfinished_states}))
    FOR NO KEY UPDATE OF s SKIP LOCKED
),
retired AS (
    UPDATE {schedule} s SET status = %(status_retired)s, retired_at = %(now)s,
        updated_at = %(now)s
    FROM done WHERE s.id = done.id
    RETURNING s.id, s.tenant, s.key, s.origin, s.timing_kind, s.run_at, s.delay
),
consumed AS (
    INSERT INTO {consumed} (tenant, key, timing_kind, run_at, delay, consumed_at)
    SELECT tenant, key, timing_kind,
           CASE WHEN timing_kind = %(timing_at)s THEN run_at END,
           CASE WHEN timing_kind = %(timing_after)s THEN delay END, %(now)s
    FROM retired WHERE origin = %(origin_code)s
    ON CONFLICT DO NOTHING
)
SELECT id, tenant, key FROM retired ORDER BY id

-- name: pick_retired_one_offs
-- Retired one-offs whose retention has passed since they retired: their Limit's keep_for,
-- or the caller's duration when the Limit only counts (or there is none).
SELECT s.id FROM {schedule} s LEFT JOIN {limit} l ON l.schedule_id = s.id
WHERE s.timing_kind IN (%(timing_at)s, %(timing_after)s) AND s.status = %(status_retired)s
  AND s.retired_at IS NOT NULL
  AND %(now)s::timestamptz - s.retired_at > COALESCE(l.keep_for, %(keep)s)
  AND NOT EXISTS (SELECT 1 FROM {occurrence} o WHERE o.schedule_id = s.id
                  AND o.state IN ({unfinished_states}))
ORDER BY s.id
LIMIT %(batch)s
FOR UPDATE OF s SKIP LOCKED

-- name: remove_schedules
-- By the id array, each delete walks the (schedule, scheduled_at) index: a plan whose cost
-- does not grow with the occurrence table (a join here cost a JIT compile at 10M rows).
WITH occurrences AS (
    SELECT o.id FROM {occurrence} o WHERE o.schedule_id = ANY(%(ids)s::bigint[])
),
steps AS (DELETE FROM {step} WHERE occurrence_id IN (SELECT id FROM occurrences)),
attempts AS (DELETE FROM {attempt} WHERE occurrence_id IN (SELECT id FROM occurrences)),
occ AS (DELETE FROM {occurrence} WHERE id IN (SELECT id FROM occurrences)),
limits AS (DELETE FROM {limit} WHERE schedule_id = ANY(%(ids)s::bigint[])),
books AS (DELETE FROM {runbook} WHERE schedule_id = ANY(%(ids)s::bigint[])),
removed AS (
    DELETE FROM {schedule} WHERE id = ANY(%(ids)s::bigint[]) RETURNING id, tenant, key
)
SELECT id, tenant, key FROM removed ORDER BY id

-- name: consumed_one_offs
SELECT tenant, key, timing_kind, run_at, delay FROM {consumed}

-- name: record_retention
-- The one RetentionState row, one upsert.
INSERT INTO {retention_state} AS r (id, replica, started_at, finished_at,
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
