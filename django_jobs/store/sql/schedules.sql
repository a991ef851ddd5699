-- Schedule records, their retention Limits and their Runbooks, as the services write them
-- (jobs sync, upsert_schedule, the policy records of enqueue(), disable and enable, replay).
-- Every parameter named after a column, ``%(<column>)s``, is the array of that column's
-- values, one per row written, in the order of ``%(id)s`` (``schedules._columns`` binds them
-- from the rows the caller decided). Fragments: {schedule_columns}, {limit_columns},
-- {runbook_columns}, {audit_columns} (every column a COPY writes, from the models).

-- name: reserve_schedule_ids
-- Primary keys for new schedule rows, taken before they are copied in (COPY returns none).
SELECT nextval(pg_get_serial_sequence(%(table)s, 'id')) AS id
FROM generate_series(1, %(count)s)

-- name: copy_schedules
COPY {schedule} ({schedule_columns}) FROM STDIN

-- name: copy_limits
COPY {limit} ({limit_columns}) FROM STDIN

-- name: copy_runbooks
COPY {runbook} ({runbook_columns}) FROM STDIN

-- name: copy_audit
COPY {audit} ({audit_columns}) FROM STDIN

-- name: write_records
-- A record change (sync, upsert_schedule, a policy record brought to its @job): what a
-- declaration sets, where the record comes from, its status, and the planner's recovery
-- point as the change left it (re-planned from now, unparked). The rows are locked by the
-- caller, which read them after the lock: nothing else wrote them since.
-- A schedule whose queue changes takes its occurrences that wait to start along (``moved``):
-- scheduled (due or planned ahead), or failed and waiting for their retry, whatever planned
-- them. A processing one was claimed from its queue and ends there. A policy record's
-- (origin enqueue) stay: enqueue() chose their queue, the job's then or one it named, and
-- the record cannot tell which. Every part of the statement sees the rows as they were
-- before it (``before``: the old queue); ``moved`` waits for an occurrence row a claim
-- holds, then leaves it if the claim took it (no longer waiting).
WITH t AS (
    SELECT * FROM unnest(
        %(id)s::bigint[], %(job)s::text[], %(timing_kind)s::text[], %(cron)s::text[],
        %(interval)s::interval[], %(anchor)s::timestamptz[], %(run_at)s::timestamptz[],
        %(delay)s::interval[], %(time_zone)s::text[], %(skipped_time)s::text[],
        %(repeated_time)s::text[], %(rrule)s::text[], %(calendar)s::jsonb[],
        %(on_excluded)s::text[], %(zone_reason)s::text[], %(args)s::jsonb[],
        %(priority)s::smallint[], %(queue)s::text[], %(max_delay)s::interval[],
        %(overlap)s::text[], %(misfire)s::text[], %(max_catchup)s::integer[],
        %(max_attempts)s::integer[], %(backoff)s::interval[], %(max_backoff)s::interval[],
        %(timeout)s::interval[], %(operating_owner)s::text[], %(record_owner)s::text[],
        %(status)s::text[], %(decider)s::text[], %(decide_by)s::date[], %(origin)s::text[],
        %(updated_at)s::timestamptz[], %(retired_at)s::timestamptz[],
        %(next_due_at)s::timestamptz[], %(parked_at)s::timestamptz[],
        %(parked_field)s::text[], %(parked_reason)s::text[]
    ) AS t(
        id, job, timing_kind, cron, "interval", anchor, run_at, delay, time_zone,
        skipped_time, repeated_time, rrule, calendar, on_excluded, zone_reason, args,
        priority, queue, max_delay, overlap, misfire, max_catchup, max_attempts, backoff,
        max_backoff, timeout, operating_owner, record_owner, status, decider, decide_by,
        origin, updated_at, retired_at, next_due_at, parked_at, parked_field, parked_reason
    )
),
requeued AS (
    SELECT t.id, t.queue FROM t JOIN {schedule} before ON before.id = t.id
    WHERE before.queue <> t.queue AND before.origin <> %(origin_enqueue)s
),
moved AS (
    UPDATE {occurrence} o SET queue = r.queue
    FROM requeued r
    WHERE o.schedule_id = r.id AND o.state IN (%(scheduled)s, %(failed)s)
      AND o.queue <> r.queue
)
UPDATE {schedule} s SET
    job = t.job, timing_kind = t.timing_kind, cron = t.cron, "interval" = t.interval,
    anchor = t.anchor, run_at = t.run_at, delay = t.delay, time_zone = t.time_zone,
    skipped_time = t.skipped_time, repeated_time = t.repeated_time, rrule = t.rrule,
    calendar = t.calendar, on_excluded = t.on_excluded, zone_reason = t.zone_reason,
    args = t.args, priority = t.priority, queue = t.queue, max_delay = t.max_delay,
    overlap = t.overlap, misfire = t.misfire, max_catchup = t.max_catchup,
    max_attempts = t.max_attempts, backoff = t.backoff, max_backoff = t.max_backoff,
    timeout = t.timeout, operating_owner = t.operating_owner, record_owner = t.record_owner,
    status = t.status, decider = t.decider, decide_by = t.decide_by, origin = t.origin,
    updated_at = t.updated_at, retired_at = t.retired_at, next_due_at = t.next_due_at,
    parked_at = t.parked_at, parked_field = t.parked_field, parked_reason = t.parked_reason
FROM t
WHERE s.id = t.id

-- name: write_status
-- Retired (sync: no longer declared), or active again (a retired one-off replayed).
UPDATE {schedule} s SET status = t.status, retired_at = t.retired_at, updated_at = t.updated_at
FROM unnest(
    %(id)s::bigint[], %(status)s::text[], %(retired_at)s::timestamptz[],
    %(updated_at)s::timestamptz[]
) AS t(id, status, retired_at, updated_at)
WHERE s.id = t.id

-- name: write_disabled
-- Disabled (or disabled again): who, why, since when, and whether by its tenant's pause.
UPDATE {schedule} s SET enabled = t.enabled, disabled_by = t.disabled_by,
    disabled_reason = t.disabled_reason, disabled_at = t.disabled_at,
    paused_by_tenant = t.paused_by_tenant, updated_at = t.updated_at
FROM unnest(
    %(id)s::bigint[], %(enabled)s::boolean[], %(disabled_by)s::text[],
    %(disabled_reason)s::text[], %(disabled_at)s::timestamptz[],
    %(paused_by_tenant)s::boolean[], %(updated_at)s::timestamptz[]
) AS t(id, enabled, disabled_by, disabled_reason, disabled_at, paused_by_tenant, updated_at)
WHERE s.id = t.id

-- name: write_enabled
-- Enabled: no longer disabled, unparked and due, so the next plan pass checks the record.
UPDATE {schedule} s SET enabled = t.enabled, disabled_by = t.disabled_by,
    disabled_reason = t.disabled_reason, disabled_at = t.disabled_at,
    paused_by_tenant = t.paused_by_tenant, parked_at = t.parked_at,
    parked_field = t.parked_field, parked_reason = t.parked_reason,
    next_due_at = t.next_due_at, updated_at = t.updated_at
FROM unnest(
    %(id)s::bigint[], %(enabled)s::boolean[], %(disabled_by)s::text[],
    %(disabled_reason)s::text[], %(disabled_at)s::timestamptz[],
    %(paused_by_tenant)s::boolean[], %(parked_at)s::timestamptz[], %(parked_field)s::text[],
    %(parked_reason)s::text[], %(next_due_at)s::timestamptz[], %(updated_at)s::timestamptz[]
) AS t(
    id, enabled, disabled_by, disabled_reason, disabled_at, paused_by_tenant, parked_at,
    parked_field, parked_reason, next_due_at, updated_at
)
WHERE s.id = t.id

-- name: write_limits
-- Each schedule's retention: its Limit created, or changed in place.
INSERT INTO {limit} (schedule_id, keep_for, keep_last)
SELECT * FROM unnest(
    %(schedule_id)s::bigint[], %(keep_for)s::interval[], %(keep_last)s::integer[]
)
ON CONFLICT (schedule_id) DO UPDATE SET keep_for = EXCLUDED.keep_for,
    keep_last = EXCLUDED.keep_last

-- name: write_runbooks
-- Runbooks created, or their texts brought up to date, one per schedule and kind.
INSERT INTO {runbook} (schedule_id, kind, interface, claimed_occurrence_effect, verification)
SELECT * FROM unnest(
    %(schedule_id)s::bigint[], %(kind)s::text[], %(interface)s::text[],
    %(claimed_occurrence_effect)s::text[], %(verification)s::text[]
)
ON CONFLICT (schedule_id, kind) DO UPDATE SET interface = EXCLUDED.interface,
    claimed_occurrence_effect = EXCLUDED.claimed_occurrence_effect,
    verification = EXCLUDED.verification
