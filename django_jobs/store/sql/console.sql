-- The console's reads (django_jobs.services.dashboard): what the dashboard shows, of the
-- schedules a user may see. {visible} and {visible_schedule} are the permission filter
-- (empty for a user who sees every schedule, else a test of the id against %(ids)s).
-- Every statement reads an index range: the due index, the scheduled_at index over the
-- window (django_jobs_occurrence_newest, whose always-true condition fencing_token >= 0 a
-- window statement repeats so that it may use it), or one schedule's (schedule,
-- scheduled_at) indexes; none counts the whole table.

-- name: due
-- Due work not started (scheduled, or failed and waiting for its retry): how much, counted
-- up to %(cap)s, and the oldest due instant.
SELECT count(*) AS waiting, min(due_at) AS oldest
FROM (
    SELECT due_at FROM {occurrence}
    WHERE state IN (%(scheduled)s, %(failed)s) AND due_at <= %(now)s {visible}
    ORDER BY due_at
    LIMIT %(cap)s
) due

-- name: queues
-- By queue: the due work not started (as "due" counts it, within the same %(cap)s rows), and
-- the occurrences running now (processing, lease not lapsed: one range of
-- django_jobs_occurrence_running per queue).
WITH due AS (
    SELECT queue, count(*) AS due FROM (
        SELECT queue FROM {occurrence}
        WHERE state IN (%(scheduled)s, %(failed)s) AND due_at <= %(now)s {visible}
        ORDER BY due_at
        LIMIT %(cap)s
    ) d
    GROUP BY queue
),
running AS (
    SELECT queue, count(*) AS running FROM {occurrence}
    WHERE state = %(processing)s AND lease_expires_at > %(now)s {visible}
    GROUP BY queue
)
SELECT queue, coalesce(due.due, 0) AS due, coalesce(running.running, 0) AS running
FROM due FULL JOIN running USING (queue)
ORDER BY queue

-- name: chart
-- Occurrences scheduled in [since, now), by state and by bucket (1..%(buckets)s).
SELECT width_bucket(extract(epoch FROM scheduled_at), %(since_epoch)s, %(now_epoch)s,
                    %(buckets)s) AS bucket,
       state, count(*) AS occurrences
FROM {occurrence}
WHERE scheduled_at >= %(since)s AND scheduled_at < %(now)s AND fencing_token >= 0 {visible}
GROUP BY 1, 2

-- name: lines
-- One page of the schedules' lines, those that most need attention first: dead letters,
-- then the longest failing streak, then the latest starts. Over the window: outcomes and
-- start lateness (seconds from the scheduled instant to the first start); of the whole retained
-- history: the newest outcome, the failing streak (failed or dead, newest first, among the
-- newest %(streak_depth)s ended ones) and the dead letters (counted up to %(cap)s).
WITH win AS (
    SELECT schedule_id,
           count(*) FILTER (WHERE state = %(completed)s) AS completed,
           count(*) FILTER (WHERE state IN (%(failed)s, %(dead)s)) AS failing,
           count(*) FILTER (WHERE state = %(skipped)s) AS skipped,
           -- Of occurrences started once, by their schedule: the row's start is then its
           -- first attempt's (a retry's backoff or an operator's replay is not lateness).
           percentile_cont(0.5) WITHIN GROUP (
               ORDER BY extract(epoch FROM started_at - scheduled_at))
               FILTER (WHERE attempts = 1 AND trigger <> %(trigger_manual)s) AS late_p50,
           percentile_cont(0.99) WITHIN GROUP (
               ORDER BY extract(epoch FROM started_at - scheduled_at))
               FILTER (WHERE attempts = 1 AND trigger <> %(trigger_manual)s) AS late_p99
    FROM {occurrence}
    WHERE scheduled_at >= %(since)s AND scheduled_at < %(now)s AND fencing_token >= 0 {visible}
    GROUP BY schedule_id
),
page AS (
    SELECT s.id, s.tenant, s.key, dead.letters, ended.states
    FROM {schedule} s
    CROSS JOIN LATERAL (
        SELECT count(*) AS letters FROM (
            SELECT 1 FROM {occurrence} o
            WHERE o.schedule_id = s.id AND o.state = %(dead)s LIMIT %(cap)s
        ) d
    ) dead
    CROSS JOIN LATERAL (
        SELECT array_agg(state ORDER BY scheduled_at DESC) AS states FROM (
            SELECT o.state, o.scheduled_at FROM {occurrence} o
            WHERE o.schedule_id = s.id
              AND o.state IN (%(completed)s, %(failed)s, %(dead)s, %(cancelled)s)
            ORDER BY o.scheduled_at DESC
            LIMIT %(streak_depth)s
        ) newest
    ) ended
    WHERE s.status <> %(status_retired)s {visible_schedule}
)
SELECT page.id AS schedule_id, page.letters AS dead,
       page.states[1] AS last_outcome,
       coalesce(array_position(page.states, %(completed)s::varchar) - 1,
                cardinality(page.states), 0) AS streak,
       coalesce(win.completed, 0) AS completed, coalesce(win.failing, 0) AS failing,
       coalesce(win.skipped, 0) AS skipped, win.late_p50, win.late_p99
FROM page LEFT JOIN win ON win.schedule_id = page.id
ORDER BY page.letters DESC, 4 DESC, win.late_p99 DESC NULLS LAST, page.tenant, page.key
LIMIT %(limit)s OFFSET %(offset)s
