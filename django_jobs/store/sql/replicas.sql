-- Replicas and wake-ups: heartbeats, the next instant a worker must wake, notifications.

-- name: heartbeat
INSERT INTO {replica}
    (id, host, pid, started_at, heartbeat_at, state, concurrency, running)
VALUES (%(id)s, %(host)s, %(pid)s, %(started)s, %(now)s, %(state)s, %(conc)s, %(running)s)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at,
    state = EXCLUDED.state, running = EXCLUDED.running

-- name: next_schedule_due
-- When the next plan pass has work: the earliest next due instant less the plan-ahead
-- interval (one lookup of the due index), never before year 1 (which Python cannot hold).
SELECT GREATEST(min(s.next_due_at) - %(ahead)s::interval,
                '0001-01-02 00:00:00+00'::timestamptz) AS next_due_at
FROM {schedule} s
WHERE {plannable}
HAVING min(s.next_due_at) IS NOT NULL

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
