-- Enqueued work: one occurrence of a job's policy record, written in the caller's transaction.

-- name: enqueue
-- The occurrence, unless its identity exists already (a key enqueued before: nothing
-- changes), under the policy record (tenant, key) if there is one; the wake-up NOTIFY with
-- it, which PostgreSQL delivers when the caller's transaction commits (and never, if it
-- rolls back). ``recorded``: whether the policy record exists (if not, nothing was written).
WITH inserted AS (
    INSERT INTO {occurrence} (
        id, schedule_id, tenant, scheduled_at, state, skip_reason, trigger, due_at,
        lease_owner, fencing_token, attempts, failures, last_error_type, last_error_message,
        args, priority
    )
    SELECT %(id)s, s.id, s.tenant, %(at)s, %(scheduled)s, '', %(trigger_enqueued)s, %(at)s,
           '', 0, 0, 0, '', '', %(args)s, COALESCE(%(priority)s::smallint, s.priority)
    FROM {schedule} s
    WHERE s.tenant = %(tenant)s AND s.key = %(key)s
    ON CONFLICT (id) DO NOTHING
    RETURNING id
)
SELECT (SELECT count(*) FROM inserted) = 1 AS created,
       (SELECT count(pg_notify(%(channel)s, %(reason)s)) FROM inserted) AS notified,
       EXISTS (SELECT 1 FROM {schedule} s
               WHERE s.tenant = %(tenant)s AND s.key = %(key)s) AS recorded
