-- Operator actions (django_jobs.services calls them inside its transaction): replay, cancel.

-- name: replay
-- Only a finished occurrence (not scheduled or processing) of the schedule and tenant the
-- service checked.
UPDATE {occurrence} SET state = %(scheduled)s, due_at = %(now)s, trigger = %(trigger_manual)s,
    skip_reason = '', finished_at = NULL, failures = 0
WHERE id = %(id)s AND schedule_id = %(schedule)s AND tenant = %(tenant)s
  AND state IN (%(dead)s, %(failed)s, %(skipped)s, %(completed)s, %(cancelled)s)
RETURNING id

-- name: cancel_running
WITH gone AS (
    UPDATE {occurrence} SET state = %(cancelled)s, finished_at = %(now)s,
        lease_owner = '', lease_expires_at = NULL
    WHERE schedule_id = %(schedule)s AND tenant = %(tenant)s AND state = %(processing)s
    RETURNING id, fencing_token
),
ended AS (
    UPDATE {attempt} a SET outcome = %(attempt_cancelled)s, finished_at = %(now)s
    FROM gone WHERE a.occurrence_id = gone.id AND a.fencing_token = gone.fencing_token
      AND a.outcome = %(attempt_running)s
),
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
WITH gone AS (
    UPDATE {occurrence} SET state = %(cancelled)s, finished_at = %(now)s,
        lease_owner = '', lease_expires_at = NULL
    WHERE id = %(id)s AND schedule_id = %(schedule)s AND tenant = %(tenant)s
      AND state IN (%(scheduled)s, %(failed)s, %(processing)s)
    RETURNING id, fencing_token
),
ended AS (
    UPDATE {attempt} a SET outcome = %(attempt_cancelled)s, finished_at = %(now)s
    FROM gone WHERE a.occurrence_id = gone.id AND a.fencing_token = gone.fencing_token
      AND a.outcome IN (%(attempt_running)s, %(attempt_claimed)s)
),
freed AS (
    UPDATE {schedule} SET running_occurrence = NULL
    WHERE id = %(schedule)s AND tenant = %(tenant)s
      AND running_occurrence IN (SELECT id FROM gone)
)
SELECT id FROM gone
