-- Completion: the fenced writes that end an attempt, and excusing an outage.
--
-- The first four are not statements: each is what the fenced write (sql/fenced_write.sql)
-- sets on an accepted occurrence besides ending its lease, one per way an attempt ends.

-- name: completed
-- With what the handler returned (NULL: nothing).
state = %(completed)s, finished_at = %(now)s, result = %(result)s::jsonb

-- name: retry
state = %(failed)s, due_at = %(retry_at)s, trigger = %(trigger_retry)s,
failures = o.failures + 1,
last_error_type = %(error_type)s, last_error_message = %(error_message)s

-- name: dead
state = %(dead)s, finished_at = %(now)s,
failures = o.failures + 1,
last_error_type = %(error_type)s, last_error_message = %(error_message)s

-- name: released
-- Claimable again at once, as what it was: a retry stays one.
state = CASE WHEN o.trigger = %(trigger_retry)s THEN %(failed)s ELSE %(scheduled)s END,
due_at = %(now)s

-- name: fenced_out
-- The attempts of refused leases (their token stale): fenced_out, on the history row the
-- claim that took each over wrote (lease_lost), or an open row of the release before #38.
-- Its own statement, after the fenced write: a takeover that committed while that write
-- waited for the row is in this statement's snapshot, not in the write's.
UPDATE {attempt} a SET outcome = %(attempt_fenced_out)s, finished_at = %(now)s,
    error_type = %(error_type)s, error_message = %(error_message)s
FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)
WHERE a.occurrence_id = t.id AND a.fencing_token = t.token
  AND a.outcome IN (%(attempt_running)s, %(attempt_claimed)s, %(attempt_lease_lost)s)

-- name: excuse_outage
WITH counted AS (
    SELECT a.id FROM {attempt} a
    WHERE a.occurrence_id = %(id)s AND a.fencing_token = %(token)s
      AND a.replica = %(owner)s
      AND a.outcome IN (%(attempt_lease_lost)s, %(attempt_fenced_out)s)
    FOR UPDATE
),
excused AS (
    UPDATE {attempt} a SET outcome = %(attempt_outage)s,
        finished_at = COALESCE(a.finished_at, %(now)s)
    FROM counted WHERE a.id = counted.id
    RETURNING a.id
),
revived AS (
    SELECT o.id FROM {occurrence} o
    WHERE o.id = %(id)s AND o.state = %(dead)s AND o.fencing_token = %(token)s
      AND o.last_error_type = %(worker_lost)s AND EXISTS (SELECT 1 FROM excused)
)
UPDATE {occurrence} o SET
    failures = GREATEST(o.failures - 1, 0),
    state = CASE WHEN o.id IN (SELECT id FROM revived) THEN %(scheduled)s ELSE o.state END,
    due_at = CASE WHEN o.id IN (SELECT id FROM revived) THEN %(now)s ELSE o.due_at END,
    finished_at = CASE WHEN o.id IN (SELECT id FROM revived) THEN NULL
                  ELSE o.finished_at END,
    last_error_type = CASE WHEN o.id IN (SELECT id FROM revived) THEN ''
                      ELSE o.last_error_type END,
    last_error_message = CASE WHEN o.id IN (SELECT id FROM revived) THEN ''
                         ELSE o.last_error_message END
WHERE o.id = %(id)s AND EXISTS (SELECT 1 FROM excused)
RETURNING o.id

-- name: record_result
-- What a handler returned after run.atomic() committed its completion: kept while the
-- occurrence is still that completion (the token it completed with, not replayed since).
UPDATE {occurrence} SET result = %(result)s::jsonb
WHERE id = %(id)s AND fencing_token = %(token)s AND state = %(completed)s
RETURNING id

-- name: outage_streak
-- How many attempts of an occurrence in a row, newest first, ended by a store outage: those
-- since its newest attempt that ended any other way (the attempt running now aside).
SELECT count(*) AS streak FROM {attempt} a
WHERE a.occurrence_id = %(id)s AND a.outcome = %(attempt_outage)s
  AND a.number > COALESCE(
      (SELECT max(b.number) FROM {attempt} b
       WHERE b.occurrence_id = %(id)s
         AND b.outcome NOT IN (%(attempt_outage)s, %(attempt_running)s, %(attempt_claimed)s)),
      0)
