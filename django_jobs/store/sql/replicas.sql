-- Replicas and wake-ups: heartbeats, the next instant a worker must wake, notifications.

-- name: heartbeat
INSERT INTO {replica}
    (id, host, pid, started_at, heartbeat_at, state, concurrency, running, threads, queues)
VALUES (%(id)s, %(host)s, %(pid)s, %(started)s, %(now)s, %(state)s, %(conc)s, %(running)s,
        %(threads)s, %(queues)s)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at,
    state = EXCLUDED.state, running = EXCLUDED.running, threads = EXCLUDED.threads,
    queues = EXCLUDED.queues

-- name: next_schedule_due
-- When the next plan pass has work: the earliest next due instant less the plan-ahead
-- interval, never before year 1 (which Python cannot hold). The due index is walked in
-- order from its first non-NULL entry and the walk stops at the first plannable row: an
-- aggregate (min) would read every entry of the index, the NULLs of schedules with
-- nothing more to plan included (10,000 of them after a burst of one-offs: 5-8 ms a call,
-- at every idle step of every replica).
SELECT GREATEST(s.next_due_at - %(ahead)s::interval,
                '0001-01-02 00:00:00+00'::timestamptz) AS next_due_at
FROM {schedule} s
WHERE s.next_due_at IS NOT NULL AND {plannable}
ORDER BY s.next_due_at
LIMIT 1

-- name: next_wakeup
-- Walks of due indexes in order, each stopping at its first row: the schedule one is
-- next_schedule_due; for a replica serving every queue (%(queues)s NULL), the claimable
-- occurrences' due-at index; for one serving named queues, one range of
-- django_jobs_occurrence_qdue per served queue (queue, due_at), so the rows of the queues it
-- does not serve are never read (a walk of the due-at index filtered by queue read every one
-- of them due before its own first row). LEAST ignores the walk not taken (NULL).
SELECT LEAST(
    ({next_schedule_due}),
    (SELECT o.due_at FROM {occurrence} o
     WHERE %(queues)s::text[] IS NULL
       AND o.state IN ({claimable_states})
       -- A filter, not an index condition (IS TRUE): as one, its OR would make the planner
       -- read every due row through a bitmap and sort them, whenever the statistics are
       -- older than a burst.
       AND ({due_at_loadable}) IS TRUE
       AND (cardinality(%(excluded)s::text[]) = 0 OR EXISTS (
            SELECT 1 FROM {schedule} s WHERE s.id = o.schedule_id
              AND {not_paused}))
     ORDER BY o.due_at
     LIMIT 1),
    (SELECT min(first.due_at)
     FROM unnest(%(queues)s::text[]) AS served(queue)
     CROSS JOIN LATERAL (
         SELECT o.due_at FROM {occurrence} o
         WHERE o.queue = served.queue
           AND o.state IN ({claimable_states})
           AND ({due_at_loadable}) IS TRUE
           AND (cardinality(%(excluded)s::text[]) = 0 OR EXISTS (
                SELECT 1 FROM {schedule} s WHERE s.id = o.schedule_id
                  AND {not_paused}))
         -- due_at itself, as the index holds it (django_jobs_claim_order at priority 0).
         ORDER BY django_jobs_claim_order(o.due_at, 0::smallint)
         LIMIT 1) AS first)
) AS wakeup

-- name: notify
SELECT pg_notify(%(channel)s, %(reason)s)

-- name: declare_gone
-- Replicas silent since %(before)s (draining ones: since %(before_draining)s), declared
-- gone, each by one declarer: a compare-and-set, so a concurrent declarer finds the row
-- locked, or no longer running. A replica that heartbeats again is running again (the
-- heartbeat's upsert sets its state).
UPDATE {replica} r SET state = %(replica_gone)s
FROM (SELECT id FROM {replica}
      WHERE ((state = %(replica_running)s AND heartbeat_at < %(before)s)
             OR (state = %(replica_draining)s AND heartbeat_at < %(before_draining)s))
        AND id <> %(by)s
      FOR UPDATE SKIP LOCKED) silent
WHERE r.id = silent.id
RETURNING r.id, r.host, r.pid, r.heartbeat_at
