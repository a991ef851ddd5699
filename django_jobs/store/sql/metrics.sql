-- Metrics: what a Prometheus scrape reads (django_jobs/metrics.py, through services). Every
-- statement walks a partial or per-schedule index and reads what it bounds, never the whole
-- occurrence table: docs/operations.md, "Metrics", gives each one's cost at 10 million rows.

-- name: due_backlog
-- Due work that no replica has started: claimable rows whose due_at has passed (a processing
-- row's due_at is its lease expiry, so one here lost its holder). A walk of
-- django_jobs_occurrence_due over the due range, stopped after %(cap)s rows so that a scrape
-- during a backlog of millions costs what one of %(cap)s does.
-- Counted by state and by queue (queues are few: those the deploy names).
SELECT d.state, d.queue, count(*) AS due
FROM (SELECT o.state, o.queue FROM {occurrence} o
      WHERE o.state IN ({claimable_states}) AND o.due_at <= %(now)s
      LIMIT %(cap)s) d
GROUP BY d.state, d.queue

-- name: running_by_queue
-- Occurrences running now, by queue: processing rows whose lease has not lapsed, one range
-- of django_jobs_occurrence_running (queue, lease_expires_at) per queue; as many rows as run.
SELECT o.queue, count(*) AS running
FROM {occurrence} o
WHERE o.state = %(processing)s AND o.lease_expires_at > %(now)s
GROUP BY o.queue

-- name: waiting_queues
-- The queues that have work waiting (scheduled, or failed and waiting for its retry), due or
-- not: a skip scan of an index leading with the queue (django_jobs_occurrence_qdue or _queue,
-- the planner's choice), one descent per queue (queues are few), never a DISTINCT over the rows. What jobs health and django_jobs_queue_unserved
-- compare with the queues the live replicas serve.
WITH RECURSIVE q AS (
    (SELECT o.queue FROM {occurrence} o
     WHERE o.state IN (%(scheduled)s, %(failed)s)
     ORDER BY o.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT o.queue FROM {occurrence} o
            WHERE o.state IN (%(scheduled)s, %(failed)s) AND o.queue > q.queue
            ORDER BY o.queue LIMIT 1)
    FROM q WHERE q.queue IS NOT NULL
)
SELECT q.queue FROM q WHERE q.queue IS NOT NULL

-- name: oldest_due
-- The due instant of the oldest such row: the first entry of the same index walk (rows whose
-- due_at Python cannot hold are left out, as next_wakeup leaves them).
SELECT o.due_at FROM {occurrence} o
WHERE o.state IN ({claimable_states}) AND o.due_at <= %(now)s
  AND ({due_at_loadable}) IS TRUE
ORDER BY o.due_at
LIMIT 1

-- name: dead_letters
-- Every retained dead occurrence: an index-only count of django_jobs_occurrence_dead, whose
-- size is the dead-letter backlog.
SELECT count(*) AS dead FROM {occurrence} o WHERE o.state = %(dead)s

-- name: no_jit
-- The window's statement is estimated dear enough to be JIT-compiled, which costs more than
-- it runs (0.76 s of 1.5 s over 60,000 rows): off for the caller's transaction.
SELECT set_config('jit', 'off', true)

-- name: recent
-- The occurrences scheduled in (since, now], found schedule by schedule through
-- django_jobs_occurrence_sched (one probe per schedule, then the rows of the window: OFFSET 0
-- keeps the planner from flattening the lateral into a scan of the whole table), and what
-- became of them: rows by state, start lateness and run duration by bucket, and the lease
-- takeovers and fenced-out writes among their attempts (only an occurrence claimed more than
-- once can have either, so only those join their attempts). One row per (kind, label).
-- A value's bucket is how many of the ascending upper bounds %(lateness_le)s (or
-- %(duration_le)s) are below it: 0 for one at most the first bound, n beyond the last (the
-- caller makes them cumulative). width_bucket counts the bounds at most its operand, so it
-- is given the negated value and the negated bounds, which count those at least the value.
-- Lateness is the first start's: for a retried occurrence the first Attempt's, whose
-- started_at is its own start (the occurrence's is its last claim's). A manual run or replay
-- keeps the scheduled instant it replays, so its lateness would measure the operator: none.
WITH recent AS MATERIALIZED (
    SELECT o.id, o.state, o.attempts,
           CASE WHEN o.started_at IS NULL OR o.trigger = %(trigger_manual)s THEN NULL
                WHEN o.attempts <= 1 THEN extract(epoch FROM o.started_at - o.scheduled_at)
                ELSE extract(epoch FROM COALESCE(
                    (SELECT a.started_at FROM {attempt} a
                     WHERE a.occurrence_id = o.id AND a.number = 1), o.started_at)
                    - o.scheduled_at)
           END::float8 AS lateness,
           CASE WHEN o.state = %(completed)s AND o.started_at IS NOT NULL
                     AND o.finished_at IS NOT NULL
                THEN extract(epoch FROM o.finished_at - o.started_at)
           END::float8 AS duration
    FROM {schedule} s
    CROSS JOIN LATERAL (
        SELECT o.id, o.state, o.attempts, o.trigger, o.scheduled_at, o.started_at,
               o.finished_at
        FROM {occurrence} o
        WHERE o.schedule_id = s.id
          AND o.scheduled_at > %(since)s AND o.scheduled_at <= %(now)s
        OFFSET 0
    ) o
)
SELECT 'state' AS kind, r.state AS label, count(*)::float8 AS value
FROM recent r GROUP BY r.state
UNION ALL
SELECT 'lateness', (cardinality(%(lateness_le)s::float8[]) - width_bucket(
           -r.lateness, ARRAY(SELECT -b FROM unnest(%(lateness_le)s::float8[]) AS b
                              ORDER BY b DESC)))::text,
       count(*)
FROM recent r WHERE r.lateness IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'lateness', 'sum', COALESCE(sum(r.lateness), 0) FROM recent r
UNION ALL
SELECT 'duration', (cardinality(%(duration_le)s::float8[]) - width_bucket(
           -r.duration, ARRAY(SELECT -b FROM unnest(%(duration_le)s::float8[]) AS b
                              ORDER BY b DESC)))::text,
       count(*)
FROM recent r WHERE r.duration IS NOT NULL GROUP BY 2
UNION ALL
SELECT 'duration', 'sum', COALESCE(sum(r.duration), 0) FROM recent r
UNION ALL
SELECT 'attempt', a.outcome, count(*)
FROM recent r JOIN {attempt} a ON a.occurrence_id = r.id
WHERE r.attempts > 1 AND a.outcome IN (%(attempt_lease_lost)s, %(attempt_fenced_out)s)
GROUP BY a.outcome
