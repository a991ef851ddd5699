-- Replicas and wake-ups: heartbeats, the next instant a worker must wake, notifications.

-- name: heartbeat
INSERT INTO {replica}
    (id, host, pid, started_at, heartbeat_at, state, concurrency, running)
VALUES (%(id)s, %(host)s, %(pid)s, %(started)s, %(now)s, %(state)s, %(conc)s, %(running)s)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at,
    state = EXCLUDED.state, running = EXCLUDED.running

-- name: next_schedule_due
SELECT min(s.next_due_at) AS next_due_at FROM {schedule} s
WHERE s.enabled AND s.status = %(status_active)s
  AND {next_due_at_loadable}
  AND (cardinality(%(excluded)s::text[]) = 0 OR {not_paused})
  AND (%(jobs)s::text[] IS NULL OR s.job = ANY(%(jobs)s::text[]))

-- name: next_wakeup
-- Two index lookups: the schedule one is next_schedule_due.
SELECT LEAST(
    ({next_schedule_due}),
    (SELECT min(o.due_at) FROM {occurrence} o
     WHERE o.state IN ({claimable_states})
       AND {due_at_loadable}
       AND (cardinality(%(excluded)s::text[]) = 0 OR EXISTS (
            SELECT 1 FROM {schedule} s WHERE s.id = o.schedule_id
              AND {not_paused})))
) AS wakeup

-- name: notify
SELECT pg_notify(%(channel)s, %(reason)s)
