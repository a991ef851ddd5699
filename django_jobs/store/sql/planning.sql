-- Planning: what the worker's plan pass reads and writes, and the occurrences services plan.
-- Fragments: {not_paused} (the kill switch), {loadable} (every value of the schedule row
-- ``s`` Python can hold), {unloadable_row}, {unloadable_field} and {unloadable_value} (the
-- same test on the row ``r``, and which column fails it), {loadable_instant} (the
-- occurrence's scheduled_at), {capped_max_delay} (``t.max_delay`` within 0 and 100,000 days),
-- {claimable_states} (placeholders of those states: the live-rows partial index).

-- name: insert_planned
-- Not a statement: the WITH clause that ``plan`` and ``write_plan`` open with. Inserts
-- idempotently: the identity is the primary key, so an instant planned twice (here or on
-- another replica, concurrently or not) is a no-op. ``inserted`` holds the new identities.
-- Each occurrence keeps its arguments (those given, or its schedule's as they are now: the
-- plan pass holds the schedule rows it plans locked) and its schedule's priority, so a later
-- change of the schedule's never alters an occurrence already planned.
WITH input AS (
    SELECT * FROM unnest(
        %(ids)s::uuid[], %(schedules)s::bigint[], %(tenants)s::text[],
        %(instants)s::timestamptz[], %(reasons)s::text[], %(triggers)s::text[],
        %(args)s::jsonb[]
    ) AS t(id, schedule_id, tenant, scheduled_at, skip_reason, trg, args)
),
inserted AS (
    INSERT INTO {occurrence} (
        id, schedule_id, tenant, scheduled_at, state, skip_reason, trigger, due_at,
        lease_owner, fencing_token, attempts, failures, finished_at,
        last_error_type, last_error_message, args, priority, queue
    )
    SELECT i.id, i.schedule_id, i.tenant, i.scheduled_at,
           CASE WHEN i.skip_reason = '' THEN %(scheduled)s ELSE %(skipped)s END,
           i.skip_reason, i.trg, i.scheduled_at, '', 0, 0, 0,
           CASE WHEN i.skip_reason = '' THEN NULL ELSE %(now)s::timestamptz END,
           '', '', COALESCE(i.args, s.args, '{{}}'::jsonb), COALESCE(s.priority, 0),
           COALESCE(s.queue, 'default')
    FROM input i LEFT JOIN {schedule} s ON s.id = i.schedule_id
    ON CONFLICT (id) DO NOTHING
    RETURNING id, schedule_id, scheduled_at, skip_reason
)

-- name: plan
-- Occurrences planned, and each schedule's recovery point moved up to its latest instant
-- (unless told not to: replay_at plans an instant without moving it).
{insert_planned},
progress AS (
    UPDATE {schedule} s SET last_scheduled_at = latest.at
    FROM (SELECT schedule_id, max(scheduled_at) AS at FROM input GROUP BY schedule_id) AS latest
    WHERE %(move_recovery_point)s AND s.id = latest.schedule_id
      AND (s.last_scheduled_at IS NULL OR s.last_scheduled_at < latest.at)
)
SELECT id FROM inserted

-- name: write_plan
-- The plan pass's occurrences, and each decided schedule's recovery point and next due
-- instant set to what the planner decided, in one statement.
{insert_planned},
progress AS (
    UPDATE {schedule} s SET last_scheduled_at = t.last_at, next_due_at = t.next_at
    FROM unnest(%(advance_ids)s::bigint[], %(lasts)s::timestamptz[], %(nexts)s::timestamptz[])
         AS t(id, last_at, next_at)
    WHERE s.id = t.id
)
-- The new occurrences recorded skipped, for the alerts (signals.occurrence_skipped), read by
-- their column names (planning._skipped), as mark_missed's are.
SELECT id, schedule_id, scheduled_at, skip_reason FROM inserted WHERE skip_reason <> ''

-- name: mark_missed
-- Planned occurrences the misfire (or overlap) policy decided: run late (trigger catchup) or
-- skipped with a reason. Only those still scheduled and never started change: a claim that
-- won the race keeps its occurrence. Returns the skipped ones, for the alerts, read by their
-- column names (planning._skipped), as write_plan's are.
WITH caught AS (
    UPDATE {occurrence} SET trigger = %(trigger_catchup)s
    WHERE id = ANY(%(catch_up)s::uuid[]) AND state = %(scheduled)s AND attempts = 0
)
UPDATE {occurrence} o SET state = %(skipped)s, skip_reason = t.reason, finished_at = %(now)s
FROM unnest(%(skip_ids)s::uuid[], %(reasons)s::text[]) AS t(id, reason)
WHERE o.id = t.id AND o.state = %(scheduled)s AND o.attempts = 0
RETURNING o.id, o.schedule_id, o.scheduled_at, o.skip_reason

-- name: take_up_parked_jobs
-- Schedules parked because no replica had their job (``park_unplannable``), whose job this
-- replica has: due again now.
UPDATE {schedule} SET next_due_at = %(now)s, parked_at = NULL, parked_field = '',
    parked_reason = ''
WHERE id IN (SELECT id FROM {schedule}
             WHERE parked_field = %(job_field)s AND job = ANY(%(jobs)s::text[])
             FOR NO KEY UPDATE SKIP LOCKED)

-- name: lock_due_schedules
-- Due now, or within the plan-ahead horizon.
SELECT * FROM {schedule} s
WHERE s.enabled AND s.status = %(status_active)s AND s.next_due_at <= %(horizon)s
  AND {not_paused}
  AND {loadable}
  AND (%(jobs)s::text[] IS NULL OR s.job = ANY(%(jobs)s::text[]))
ORDER BY s.next_due_at
LIMIT %(limit)s
FOR NO KEY UPDATE SKIP LOCKED

-- name: park_unreadable
-- Parked naming the first column whose value Python cannot hold, and the value.
UPDATE {schedule} s SET next_due_at = NULL, parked_at = %(now)s, parked_field = u.field,
    parked_reason = u.field || ': ' || quote_literal(u.value) || ' is beyond what '
        || 'the worker can read (an interval of at most 999,999,999 days, an instant '
        || 'from year 1 to 9999); correct the record'
FROM (
    SELECT r.id, {unloadable_field} AS field, {unloadable_value} AS value FROM {schedule} r
    WHERE r.enabled AND r.status = %(status_active)s AND r.next_due_at <= %(now)s
      AND NOT ({unloadable_row})
    LIMIT %(limit)s
    FOR NO KEY UPDATE SKIP LOCKED
) u
WHERE s.id = u.id
RETURNING s.tenant, s.key, u.field

-- name: park
UPDATE {schedule} s SET next_due_at = NULL, parked_at = %(now)s, parked_field = t.field,
    parked_reason = t.reason
FROM unnest(%(ids)s::bigint[], %(fields)s::text[], %(reasons)s::text[]) AS t(id, field, reason)
WHERE s.id = t.id

-- name: park_unplannable
UPDATE {schedule} s SET next_due_at = NULL, parked_at = %(now)s, parked_field = %(job_field)s,
    parked_reason = 'job ' || quote_literal(s.job) || ' has no registered handler on '
        || 'replica ' || %(replica)s || ', and no replica planned the schedule for '
        || %(overdue)s || '; register the job (or correct the record), then any '
        || 'replica that has it plans the schedule again'
WHERE s.id IN (
    SELECT id FROM {schedule}
    WHERE enabled AND status = %(status_active)s AND next_due_at <= %(before)s
      AND NOT job = ANY(%(jobs)s::text[])
    ORDER BY next_due_at
    LIMIT %(limit)s
    FOR NO KEY UPDATE SKIP LOCKED
)
RETURNING s.tenant, s.key

-- name: planning_context
-- For each schedule of a pass (the live-rows partial index): its scheduled instants that
-- never started and are now later than its max_delay, and, for those that ask (overlap
-- skip), whether one of its occurrences is processing.
SELECT o.schedule_id, o.scheduled_at, o.state = %(processing)s AS processing
FROM unnest(%(ids)s::bigint[], %(tenants)s::text[], %(max_delays)s::interval[],
            %(ask_running)s::bool[])
     AS t(id, tenant, max_delay, ask_running)
JOIN {occurrence} o ON o.schedule_id = t.id
 AND o.state IN ({claimable_states})
-- Only the schedule's own occurrences: one forged into another tenant is the claim's to
-- refuse, never an instant the misfire policy decides.
WHERE o.tenant = t.tenant AND {loadable_instant}
  AND ((o.state = %(scheduled)s AND o.trigger = %(trigger_schedule)s AND o.attempts = 0
        AND o.scheduled_at < %(now)s - {capped_max_delay})
       OR (o.state = %(processing)s AND t.ask_running))
ORDER BY o.schedule_id, o.scheduled_at

-- name: lock_for_sync
SELECT pg_advisory_xact_lock(hashtext('django_jobs.sync'))

-- name: withdraw_planned_ahead
-- Occurrences planned ahead of their instant (never started, not yet due) by the record as it
-- was: gone, and each schedule's recovery point brought back to now, so the next plan pass
-- plans what the changed record says. One a claim has taken is no longer scheduled, so it
-- stays (the row lock makes the claim or this go first).
WITH withdrawn AS (
    DELETE FROM {occurrence}
    WHERE schedule_id = ANY(%(ids)s::bigint[]) AND state = %(scheduled)s AND attempts = 0
      AND trigger = %(trigger_schedule)s AND scheduled_at > %(now)s
    RETURNING schedule_id
)
UPDATE {schedule} s SET last_scheduled_at = %(now)s
WHERE s.id = ANY(%(ids)s::bigint[]) AND s.last_scheduled_at > %(now)s
