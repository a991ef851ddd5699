-- The terminal view's reads (django_jobs.services.watch, `jobs top`): what runs, what
-- failed lately, and one queue's due work, of the schedules a user may see. Each reads a
-- bounded range of an index and returns a bounded list; none counts the whole occurrence
-- table. %(ids)s is NULL for a user who sees every schedule (else the ids they may see), and
-- %(queue)s NULL for every queue.

-- name: queue_due
-- One queue's due work not started (scheduled, or failed and waiting for its retry), counted
-- up to %(cap)s, and the oldest due instant: one range of django_jobs_occurrence_qdue
-- (queue, due_at as django_jobs_claim_order(due_at, 0)), so the other queues' rows are never
-- read. The due statement of store.console reads every queue's.
SELECT count(*) AS waiting, min(due_at) AS oldest
FROM (
    SELECT o.due_at FROM {occurrence} o
    WHERE o.queue = %(queue)s AND o.state IN (%(scheduled)s, %(failed)s)
      AND django_jobs_claim_order(o.due_at, 0::smallint) <= %(now)s
      AND (%(ids)s::bigint[] IS NULL OR o.schedule_id = ANY(%(ids)s::bigint[]))
    ORDER BY django_jobs_claim_order(o.due_at, 0::smallint)
    LIMIT %(cap)s
) due

-- name: running
-- The processing occurrences, longest running first, %(limit)s of them, each with its
-- replica (the lease owner) and its schedule's name; and how many there are, counted up to
-- %(cap)s. Processing rows are the ones django_jobs_occurrence_running and _holding hold (as
-- many as the fleet runs, and those whose lease lapsed until a claim takes them over), read
-- from one of those partial indexes, never from the table. A row with no match yields one
-- row of NULLs with total 0.
WITH running AS (
    SELECT o.id, o.schedule_id, o.lease_owner, o.lease_expires_at, o.attempts,
           o.started_at, o.queue
    FROM {occurrence} o
    WHERE o.state = %(processing)s
      AND (%(ids)s::bigint[] IS NULL OR o.schedule_id = ANY(%(ids)s::bigint[]))
      AND (%(queue)s::text IS NULL OR o.queue = %(queue)s::text)
    LIMIT %(cap)s
),
counted AS (SELECT count(*) AS total FROM running)
SELECT r.id, s.tenant, s.key, r.lease_owner AS replica, r.lease_expires_at,
       r.attempts AS attempt, r.started_at, r.queue, counted.total
FROM counted
LEFT JOIN (running r JOIN {schedule} s ON s.id = r.schedule_id) ON true
ORDER BY r.started_at NULLS LAST, r.id
LIMIT %(limit)s

-- name: failures
-- The occurrences failed (waiting for a retry) or dead whose last attempt failed, timed out
-- or was lost in (%(since)s, %(now)s], newest first, %(limit)s of them, and how many there
-- are. No index holds an occurrence's finish (a failed one has no finished_at; its attempt
-- has), so they are looked for among the newest %(scan)s attempts: a backwards walk of the
-- attempt table's primary key (a row is inserted when its attempt ends, so they are numbered
-- as they end), then the occurrence of each failed one by its primary key. attempts_read and
-- read_since say how far back that walk went: fewer than %(scan)s attempts read, or the
-- earliest end read at or before %(since)s, and the window was covered. No failure yields
-- one row of NULLs.
WITH newest AS MATERIALIZED (
    SELECT a.occurrence_id, a.number, a.started_at, a.finished_at, a.outcome,
           a.error_type, a.error_message
    FROM {attempt} a
    ORDER BY a.id DESC
    LIMIT %(scan)s
),
reach AS (
    SELECT count(*) AS attempts_read, min(n.finished_at) AS read_since FROM newest n
),
failed AS (
    SELECT o.id, s.tenant, s.key, o.state, o.attempts, o.queue, n.finished_at AS failed_at,
           COALESCE(NULLIF(o.last_error_type, ''), n.error_type) AS error_type,
           COALESCE(NULLIF(o.last_error_message, ''), n.error_message) AS error_message
    FROM newest n
    JOIN {occurrence} o ON o.id = n.occurrence_id AND o.attempts = n.number
    JOIN {schedule} s ON s.id = o.schedule_id
    WHERE n.outcome IN (%(attempt_failed)s, %(attempt_timed_out)s, %(attempt_lease_lost)s)
      AND n.finished_at > %(since)s AND n.finished_at <= %(now)s
      AND o.state IN (%(failed)s, %(dead)s)
      AND (%(ids)s::bigint[] IS NULL OR o.schedule_id = ANY(%(ids)s::bigint[]))
      AND (%(queue)s::text IS NULL OR o.queue = %(queue)s::text)
)
SELECT f.id, f.tenant, f.key, f.state, f.attempts, f.queue, f.failed_at, f.error_type,
       f.error_message, count(f.id) OVER () AS total, reach.attempts_read, reach.read_since
FROM reach
LEFT JOIN failed f ON true
ORDER BY f.failed_at DESC NULLS LAST, f.id
LIMIT %(limit)s
