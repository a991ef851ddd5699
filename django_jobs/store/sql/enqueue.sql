-- Enqueued work: one occurrence of a job's policy record, written in the caller's transaction.

-- name: enqueued
-- Not a statement: the insert ``enqueue`` and ``enqueue_task`` name ``inserted``. The
-- occurrence, unless its identity exists already (a key enqueued before: nothing changes),
-- under the policy record (tenant, key) if there is one.
INSERT INTO {occurrence} (
    id, schedule_id, tenant, scheduled_at, state, skip_reason, trigger, due_at,
    lease_owner, fencing_token, attempts, failures, last_error_type, last_error_message,
    args, priority, queue
)
SELECT %(id)s, s.id, s.tenant, %(at)s, %(scheduled)s, '', %(trigger_enqueued)s, %(at)s,
       '', 0, 0, 0, '', '', %(args)s, COALESCE(%(priority)s::smallint, s.priority),
       COALESCE(%(queue)s::text, s.queue)
FROM {schedule} s
WHERE s.tenant = %(tenant)s AND s.key = %(key)s
ON CONFLICT (id) DO NOTHING
RETURNING id

-- name: outcome
-- Not a statement: what ``enqueue`` and ``enqueue_task`` return after ``inserted``, with the
-- wake-up NOTIFY, which PostgreSQL delivers when the caller's transaction commits (and
-- never, if it rolls back). ``recorded``: whether the policy record exists (if not, nothing
-- was written).
SELECT (SELECT count(*) FROM inserted) = 1 AS created,
       (SELECT count(pg_notify(%(channel)s, %(reason)s)) FROM inserted) AS notified,
       EXISTS (SELECT 1 FROM {schedule} s
               WHERE s.tenant = %(tenant)s AND s.key = %(key)s) AS recorded

-- name: enqueue
-- The occurrence (``enqueued``) and its NOTIFY (``outcome``).
WITH inserted AS ({enqueued})
{outcome}

-- name: enqueue_task
-- The same, for a Tasks backend alias, with the path of the ``Task`` enqueued recorded for
-- the alias (once: an existing row is left as it is), in the same statement so that the path
-- is recorded exactly when the caller's transaction commits.
WITH task_path AS (
    INSERT INTO {task_path} (alias, path, recorded_at)
    VALUES (%(task_alias)s, %(task_path)s, %(at_enqueue)s)
    ON CONFLICT (alias, path) DO NOTHING
),
inserted AS ({enqueued})
{outcome}

-- name: task_path_recorded
-- Whether ``path`` was recorded for the Tasks backend alias ``alias`` (its unique index).
SELECT EXISTS (SELECT 1 FROM {task_path} WHERE alias = %(alias)s AND path = %(path)s)
    AS recorded
