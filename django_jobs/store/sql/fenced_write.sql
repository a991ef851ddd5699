-- The fenced write that ends attempts (sql/completion.sql names what it sets: {accepted}).
-- An accepted lease's attempt gets its history row, with %(outcome)s: inserted here, the one
-- Attempt row write of an attempt (its claim wrote none). An open row a claim by the release
-- before #38 inserted (running, claimed) is ended in place, in a rolling upgrade. A refused
-- one's row, written by the claim that took the lease over (lease_lost), becomes fenced_out
-- in a statement of its own (completion.sql, fenced_out), which sees that claim however
-- late it committed.

-- name: fenced_write
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)
),
-- Rows another transaction has locked are skipped, never waited for: a handler's own
-- run.atomic(), or another write of this replica (a renewal, a completion batch) for as
-- long as it takes to commit (claims skip rows they cannot lock). The caller decides
-- whether to try again (worker/executor.py, _give_back).
free AS (
    SELECT o.id FROM {occurrence} o JOIN input ON o.id = input.id
    WHERE %(skip_locked)s FOR NO KEY UPDATE OF o SKIP LOCKED
),
-- The attempts as they are before this statement (``done`` sets a retry's trigger).
held AS (
    SELECT o.id, o.trigger FROM {occurrence} o JOIN input ON o.id = input.id
),
done AS (
    UPDATE {occurrence} o SET {accepted},
        lease_owner = '', lease_expires_at = NULL
    FROM input
    WHERE o.id = input.id AND o.fencing_token = input.token
      AND o.lease_owner = %(owner)s AND o.state = %(processing)s
      AND (NOT %(skip_locked)s OR o.id IN (SELECT id FROM free))
    RETURNING o.id, o.attempts, o.fencing_token, COALESCE(o.attempt_started_at, o.started_at,
                                                          %(now)s) AS since
),
ended AS (
    INSERT INTO {attempt} (occurrence_id, number, fencing_token, replica, trigger,
                           started_at, finished_at, outcome, error_type, error_message)
    SELECT done.id, done.attempts, done.fencing_token, %(owner)s, held.trigger, done.since,
           %(now)s, %(outcome)s, %(error_type)s, %(error_message)s
    FROM done JOIN held ON held.id = done.id
    ON CONFLICT (occurrence_id, fencing_token) DO UPDATE
        SET outcome = EXCLUDED.outcome, finished_at = EXCLUDED.finished_at,
            error_type = EXCLUDED.error_type, error_message = EXCLUDED.error_message
        WHERE {attempt}.outcome IN (%(attempt_running)s, %(attempt_claimed)s,
                                    %(attempt_lease_lost)s)
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
WITH held AS (
    SELECT o.trigger FROM {occurrence} o WHERE o.id = %(id)s
),
done AS (
    UPDATE {occurrence} o SET {accepted},
        lease_owner = '', lease_expires_at = NULL
    WHERE o.id = %(id)s AND o.fencing_token = %(token)s
      AND o.lease_owner = %(owner)s AND o.state = %(processing)s
    RETURNING o.id, o.attempts, o.fencing_token, COALESCE(o.attempt_started_at, o.started_at,
                                                          %(now)s) AS since
),
ended AS (
    INSERT INTO {attempt} (occurrence_id, number, fencing_token, replica, trigger,
                           started_at, finished_at, outcome, error_type, error_message)
    SELECT done.id, done.attempts, done.fencing_token, %(owner)s, held.trigger, done.since,
           %(now)s, %(outcome)s, %(error_type)s, %(error_message)s
    FROM done, held
    ON CONFLICT (occurrence_id, fencing_token) DO UPDATE
        SET outcome = EXCLUDED.outcome, finished_at = EXCLUDED.finished_at,
            error_type = EXCLUDED.error_type, error_message = EXCLUDED.error_message
        WHERE {attempt}.outcome IN (%(attempt_running)s, %(attempt_claimed)s,
                                    %(attempt_lease_lost)s)
)
SELECT id, true AS accepted FROM done
