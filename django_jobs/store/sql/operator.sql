-- Operator actions (django_jobs.services calls them inside its transaction): replay, cancel.

-- name: replay
-- Only a finished occurrence (not scheduled or processing) of the schedule and tenant the
-- service checked.
UPDATE {occurrence} SET state = %(scheduled)s, due_at = %(now)s, trigger = %(trigger_manual)s,
    skip_reason = '', finished_at = NULL, failures = 0
WHERE id = %(id)s AND schedule_id = %(schedule)s AND tenant = %(tenant)s
  AND state IN (%(dead)s, %(failed)s, %(skipped)s, %(completed)s, %(cancelled)s)
RETURNING id

-- name: cancelled_attempts
-- Not a statement: the CTE of both cancels below that writes each cancelled attempt's history
-- row (its claim wrote none; an open row a claim by the release before #38 inserted is ended
-- in place), from ``held`` (the rows as they were) and ``gone`` (the rows cancelled).
INSERT INTO {attempt} (occurrence_id, number, fencing_token, replica, trigger,
                       started_at, finished_at, outcome, error_type, error_message)
SELECT gone.id, gone.attempts, gone.fencing_token, held.lease_owner, gone.trigger,
       gone.since, %(now)s, %(attempt_cancelled)s, '', ''
FROM gone JOIN held ON held.id = gone.id
WHERE held.state = %(processing)s AND gone.attempts > 0
ON CONFLICT (occurrence_id, fencing_token) DO UPDATE
    SET outcome = EXCLUDED.outcome, finished_at = EXCLUDED.finished_at
    WHERE {attempt}.outcome IN (%(attempt_running)s, %(attempt_claimed)s)

-- name: cancel_running
-- The occurrences as they are before this statement (``gone`` clears their lease owner).
WITH held AS (
    SELECT id, state, lease_owner FROM {occurrence}
    WHERE schedule_id = %(schedule)s AND tenant = %(tenant)s AND state = %(processing)s
),
gone AS (
    UPDATE {occurrence} SET state = %(cancelled)s, finished_at = %(now)s,
        lease_owner = '', lease_expires_at = NULL
    WHERE schedule_id = %(schedule)s AND tenant = %(tenant)s AND state = %(processing)s
    RETURNING id, fencing_token, attempts, trigger,
              COALESCE(attempt_started_at, started_at, %(now)s) AS since
),
ended AS ({cancelled_attempts}),
freed AS (
    UPDATE {schedule} SET running_occurrence = NULL
    WHERE id = %(schedule)s AND tenant = %(tenant)s
      AND running_occurrence IN (SELECT id FROM gone)
)
SELECT id FROM gone

-- name: cancel_occurrence
-- One unfinished occurrence of the schedule and tenant the service checked: waiting
-- (scheduled, or failed and waiting for a retry) it will not run; processing, its lease ends
-- here, as cancel_running ends those of a whole schedule.
WITH held AS (
    SELECT id, state, lease_owner FROM {occurrence} WHERE id = %(id)s
),
gone AS (
    UPDATE {occurrence} SET state = %(cancelled)s, finished_at = %(now)s,
        lease_owner = '', lease_expires_at = NULL
    WHERE id = %(id)s AND schedule_id = %(schedule)s AND tenant = %(tenant)s
      AND state IN (%(scheduled)s, %(failed)s, %(processing)s)
    RETURNING id, fencing_token, attempts, trigger,
              COALESCE(attempt_started_at, started_at, %(now)s) AS since
),
ended AS ({cancelled_attempts}),
freed AS (
    UPDATE {schedule} SET running_occurrence = NULL
    WHERE id = %(schedule)s AND tenant = %(tenant)s
      AND running_occurrence IN (SELECT id FROM gone)
)
SELECT id FROM gone
