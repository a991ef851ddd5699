-- The fenced write that ends attempts (sql/completion.sql names what it sets: {accepted}).
-- Accepted leases get %(outcome)s on their Attempt; refused ones get fenced_out.

-- name: fenced_write
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)
),
-- Rows another transaction has locked are skipped, never waited for: only a
-- handler's own run.atomic() can hold one (claims skip rows they cannot lock).
free AS (
    SELECT o.id FROM {occurrence} o JOIN input ON o.id = input.id
    WHERE %(skip_locked)s FOR NO KEY UPDATE OF o SKIP LOCKED
),
done AS (
    UPDATE {occurrence} o SET {accepted},
        lease_owner = '', lease_expires_at = NULL
    FROM input
    WHERE o.id = input.id AND o.fencing_token = input.token
      AND o.lease_owner = %(owner)s AND o.state = %(processing)s
      AND (NOT %(skip_locked)s OR o.id IN (SELECT id FROM free))
    RETURNING o.id
),
ended AS (
    UPDATE {attempt} a SET
        outcome = CASE WHEN a.occurrence_id IN (SELECT id FROM done)
                  THEN %(outcome)s ELSE %(attempt_fenced_out)s END,
        finished_at = %(now)s,
        error_type = %(error_type)s,
        error_message = %(error_message)s
    FROM input
    WHERE a.occurrence_id = input.id AND a.fencing_token = input.token
      AND a.outcome IN (%(attempt_running)s, %(attempt_claimed)s, %(attempt_lease_lost)s)
      AND (NOT %(skip_locked)s OR a.occurrence_id IN (SELECT id FROM free))
)
-- No schedule row is written. A schedule's last completion is read from its occurrences
-- (services.with_recovery_points), and the overlap guard of a skip/queue schedule is left
-- pointing at this occurrence: a claim passes it once that occurrence is no longer
-- processing (claims.sql, ``due``), so clearing it would cost a schedule row version.
SELECT id, true AS accepted FROM done
UNION ALL
-- The rows skipped because another transaction held them: neither accepted nor refused.
SELECT input.id, false FROM input
WHERE %(skip_locked)s AND input.id NOT IN (SELECT id FROM free)
  AND EXISTS (SELECT 1 FROM {occurrence} o WHERE o.id = input.id)

-- name: fenced_write_one
-- The same for one lease (a run thread's own outcome, run.atomic()'s completion), without
-- skip_locked: every row is found by its primary key, so the plan is the same whatever the
-- statistics say, and planning it costs a fraction of the one above.
WITH done AS (
    UPDATE {occurrence} o SET {accepted},
        lease_owner = '', lease_expires_at = NULL
    WHERE o.id = %(id)s AND o.fencing_token = %(token)s
      AND o.lease_owner = %(owner)s AND o.state = %(processing)s
    RETURNING o.id
),
ended AS (
    UPDATE {attempt} a SET
        outcome = CASE WHEN EXISTS (SELECT 1 FROM done)
                  THEN %(outcome)s ELSE %(attempt_fenced_out)s END,
        finished_at = %(now)s,
        error_type = %(error_type)s,
        error_message = %(error_message)s
    WHERE a.occurrence_id = %(id)s AND a.fencing_token = %(token)s
      AND a.outcome IN (%(attempt_running)s, %(attempt_claimed)s, %(attempt_lease_lost)s)
)
SELECT id, true AS accepted FROM done
