-- Claims: due occurrences taken under a fresh lease, oldest first, FOR UPDATE SKIP LOCKED.

-- name: queue_lock
-- A queue's fleet-wide limit (DJANGO_JOBS["QUEUES"]): claims of the queue take this lock,
-- until their transaction ends, before counting its running occurrences (``queue_running``,
-- a statement of its own: its snapshot is taken after the lock is held, so it sees every
-- claim committed before). Two claimers can never both count a slot as free.
SELECT pg_advisory_xact_lock(hashtext('django_jobs.queue'), hashtext(%(queue)s))

-- name: queue_running
-- A queue's running occurrences: processing with a lease that has not lapsed (a lapsed one
-- holds no slot: a claim may take it over). Its own small index (django_jobs_occurrence_running).
SELECT count(*) AS running FROM {occurrence}
WHERE queue = %(queue)s AND state = %(processing)s AND lease_expires_at > %(now)s

-- name: walk_the_due_index
-- Turns off, for the rest of the transaction, the plans that read every due row, and returns
-- the settings they had: the target list is evaluated left to right, so each is read before
-- it is set. The costs of disabled plan types would also push the claim past
-- jit_above_cost, and compiling it takes half a second: JIT goes off with them.
SELECT current_setting('enable_sort') AS enable_sort,
       current_setting('enable_bitmapscan') AS enable_bitmapscan,
       current_setting('enable_seqscan') AS enable_seqscan,
       current_setting('jit') AS jit,
       set_config('enable_sort', 'off', true) AS sort_off,
       set_config('enable_bitmapscan', 'off', true) AS bitmapscan_off,
       set_config('enable_seqscan', 'off', true) AS seqscan_off,
       set_config('jit', 'off', true) AS jit_off

-- name: restore_planner
SELECT set_config('enable_sort', %(enable_sort)s, true),
       set_config('enable_bitmapscan', %(enable_bitmapscan)s, true),
       set_config('enable_seqscan', %(enable_seqscan)s, true),
       set_config('jit', %(jit)s, true)

-- name: claim
-- The steps are numbered in claim_runs' docstring. Due work is taken in claim order:
-- ``django_jobs_claim_order(due_at, priority)``, due_at less a minute per point of priority
-- (models.occurrences.PRIORITY_MINUTES), the expression of the claim index.
WITH due AS (
    SELECT o.id, o.due_at, django_jobs_claim_order(o.due_at, o.priority) AS claim_order,
           o.schedule_id, s.overlap, s.max_attempts, o.failures,
           o.tenant <> s.tenant AS forged, v.overlapped, v.late,
           -- The attempt holding the lease (processing: its lease has lapsed), as the row
           -- has it before this statement: its history row is written here (``lost``).
           o.state = %(processing)s AS held, o.lease_owner AS holder, o.attempts AS held_number,
           o.fencing_token AS held_token, o.trigger AS held_trigger,
           COALESCE(o.attempt_started_at, o.started_at, %(now)s) AS held_since,
           -- A lapsed lease whose attempt had started: a lost attempt. An open Attempt row
           -- of the attempt (a claim by the release before #38, in a rolling upgrade: it
           -- leaves attempt_started_at as the attempt before had it) says so instead.
           CASE WHEN o.state = %(processing)s THEN COALESCE((
               SELECT a.outcome = %(attempt_running)s FROM {attempt} a
               WHERE a.occurrence_id = o.id AND a.fencing_token = o.fencing_token
                 AND a.outcome IN (%(attempt_running)s, %(attempt_claimed)s)),
               o.attempt_started_at IS NOT NULL)
           ELSE false END AS lapsed
    FROM {occurrence} o
    -- A lateral lookup the planner cannot turn into a hash join: the claim walks the
    -- due index in order and stops after ``limit`` rows, however many are due and
    -- however stale the table's statistics (a burst has just inserted them).
    CROSS JOIN LATERAL (
        SELECT id, enabled, status, tenant, key, max_delay, overlap, max_attempts,
               timeout, backoff, max_backoff, xmin AS version
        FROM {schedule}
        WHERE id = o.schedule_id OFFSET 0
    ) s
    -- Overlap skip, decided when the instant's occurrence comes due (it may have been planned
    -- ahead, before anyone knew): a planned run that never started, due while another
    -- occurrence of its schedule is processing, is skipped (reason overlap), as the planner
    -- skips an instant that comes while the previous one runs. Retries and operators' runs
    -- wait instead.
    CROSS JOIN LATERAL (
        SELECT s.overlap = %(overlap_skip)s AND o.state = %(scheduled)s
               AND o.trigger = %(trigger_schedule)s AND o.attempts = 0
               AND o.tenant = s.tenant
               AND EXISTS (SELECT 1 FROM {occurrence} r
                           WHERE r.schedule_id = o.schedule_id AND r.id <> o.id
                             AND r.state = %(processing)s) AS overlapped,
               -- Enqueued work that could not start within its job's max_delay: skipped
               -- (reason misfire). No planner decides it, as it does a schedule's.
               o.state = %(scheduled)s AND o.trigger = %(trigger_enqueued)s
               AND o.attempts = 0 AND o.scheduled_at < %(now)s - {capped_max_delay} AS late
    ) v
    WHERE o.state IN ({claimable_states})
      AND o.due_at <= %(now)s
      AND s.enabled AND s.status = %(status_active)s
      -- Values a claim could not load (see _loadable): never claimed.
      AND {run_values_loadable}
      AND {due_at_loadable}
      AND {scheduled_at_loadable}
      AND (%(tenant)s::text IS NULL OR o.tenant = %(tenant)s::text)
      -- Which queues: every queue but the limited ones (``claim``, a walk of the claim
      -- index), or one queue (``claim_queue``, a walk of django_jobs_occurrence_queue's range
      -- of that queue, in the same claim order, written as only that index holds it:
      -- models.occurrences.QUEUE_CLAIM_ORDER), so no statistics can send the claim
      -- through other queues' rows.
      AND {queue_filter}
      -- The kill switch, by the schedule's tenant and key.
      AND {not_paused}
      -- A run missed before it ever started waits for the planner to apply the
      -- misfire policy. One that started and was released on shutdown is resumed.
      -- (A forged one is refused all the same: no planner decides it.)
      AND (o.tenant <> s.tenant
           OR NOT (o.state = %(scheduled)s AND o.trigger = %(trigger_schedule)s
                   AND o.attempts = 0
                   AND o.scheduled_at < %(now)s - {capped_max_delay}))
      -- Overlap skip/queue: one processing occurrence per schedule at a time. The
      -- schedule row is locked (SKIP LOCKED) and re-checked on its latest version. Every
      -- claim of an occurrence of it writes that row, so a row written since this
      -- statement's snapshot (g.xmin is not the version read) may have a run that started
      -- after the snapshot, which the check of running_occurrence below, reading the
      -- snapshot, would not see: such a schedule waits for the next claim. A row unchanged
      -- since the snapshot had no claim since, so the snapshot's view of its running
      -- occurrence can only be older in the safe direction (a run since ended). Two
      -- claimers can therefore never both start a run of it.
      AND (s.overlap = %(overlap_allow)s OR v.overlapped OR EXISTS (
            SELECT 1 FROM {schedule} g
            WHERE g.id = s.id AND g.xmin = s.version
              AND (g.running_occurrence IS NULL OR g.running_occurrence = o.id
                   OR NOT EXISTS (SELECT 1 FROM {occurrence} r
                                  WHERE r.id = g.running_occurrence
                                    AND r.state = %(processing)s))
            FOR NO KEY UPDATE SKIP LOCKED))
    ORDER BY {queue_order}
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
),
-- ``place``: the row's place among the runs this claim returns, in their order (a forged row
-- and one a lost attempt dead-letters are picked but not run): the worker starts the first
-- ``start_now`` of them at once and marks the rest started when a thread takes them, so
-- ``claimed`` records as started exactly those it starts at once.
picked AS (
    SELECT ranked.*, count(*) FILTER (
        WHERE NOT forged AND NOT (lapsed AND failures + 1 >= max_attempts)
    ) OVER (ORDER BY claim_order, id) AS place FROM (
        SELECT due.*, row_number() OVER (
            PARTITION BY schedule_id ORDER BY claim_order, id) AS nth
        FROM due WHERE NOT overlapped AND NOT late
    ) ranked
    WHERE overlap = %(overlap_allow)s OR nth = 1
),
overlapped AS (
    UPDATE {occurrence} o SET state = %(skipped)s, finished_at = %(now)s,
        skip_reason = CASE WHEN d.late THEN %(reason_misfire)s ELSE %(reason_overlap)s END
    FROM due d
    WHERE o.id = d.id AND (d.overlapped OR d.late)
    RETURNING o.id, o.skip_reason, o.schedule_id, o.tenant, o.scheduled_at, o.attempts
),
-- An occurrence whose tenant is not its schedule's was written behind the store's
-- back: never run under either tenant's name; dead, saying why.
forged AS (
    UPDATE {occurrence} o SET
        state = %(dead)s, finished_at = %(now)s, lease_owner = '',
        lease_expires_at = NULL, last_error_type = %(tenant_mismatch)s,
        last_error_message = 'refused: the occurrence names tenant '
            || quote_literal(o.tenant) || ' but its schedule belongs to tenant '
            || quote_literal(s.tenant)
            || '; it was not written by django_jobs and is not run'
    FROM picked p, {schedule} s
    WHERE o.id = p.id AND p.forged AND s.id = p.schedule_id
    RETURNING o.id, o.schedule_id, o.tenant, o.scheduled_at, o.attempts, o.last_error_message
),
exhausted AS (
    UPDATE {occurrence} o SET
        state = %(dead)s, finished_at = %(now)s, failures = o.failures + 1,
        lease_owner = '', lease_expires_at = NULL,
        last_error_type = %(worker_lost)s,
        last_error_message = 'attempt ' || o.attempts || ' ended without an outcome: '
            || 'the worker running it stopped (killed, crashed, or paused or cut off '
            || 'past its lease) before recording one; that used up max_attempts ('
            || p.max_attempts || '), so it is not run again'
    FROM picked p
    WHERE o.id = p.id AND NOT p.forged AND p.lapsed AND o.failures + 1 >= p.max_attempts
    RETURNING o.id, o.schedule_id, o.tenant, o.scheduled_at, o.attempts, o.last_error_message
),
claimed AS (
    UPDATE {occurrence} o SET
        state = %(processing)s,
        lease_owner = %(owner)s,
        lease_expires_at = %(expires)s,
        due_at = %(expires)s,
        -- From the one sequence: larger than any token ever given, so also than any this
        -- identity had before retention purged its row and a replay created it again. And
        -- never below the row's own next value, whatever wrote the row (a release that
        -- counted per row, still claiming during a rolling upgrade).
        fencing_token = GREATEST(nextval({fencing_tokens}), o.fencing_token + 1),
        attempts = o.attempts + 1,
        failures = o.failures + picked.lapsed::int,
        started_at = %(now)s,
        -- Started at once, or claimed ahead of a free run thread until mark_started.
        attempt_started_at = CASE WHEN %(start_now)s::int IS NULL
                                       OR picked.place <= %(start_now)s::int
                                  THEN %(now)s::timestamptz END
    FROM picked
    WHERE o.id = picked.id AND NOT picked.forged
      AND NOT (picked.lapsed AND o.failures + 1 >= picked.max_attempts)
    RETURNING o.id, o.fencing_token, o.schedule_id, o.tenant, o.scheduled_at,
              o.attempts, o.trigger, o.failures, o.args, o.queue, picked.due_at AS was_due,
              picked.claim_order, picked.overlap, picked.place,
              -- A lapsed lease whose attempt had started, taken over: who lost it.
              CASE WHEN picked.lapsed THEN picked.holder END AS lost_by
),
guarded AS (
    -- Rows locked by ``due``: no waiting here. Only overlap skip/queue schedules are
    -- written: a claim of an ``allow`` occurrence leaves its schedule row as it was (its
    -- last start is read from the occurrences, services.recovery_points).
    UPDATE {schedule} s SET running_occurrence = c.id
    FROM claimed c
    WHERE s.id = c.schedule_id AND c.overlap <> %(overlap_allow)s
),
-- The history row of a taken-over lease's attempt: ``lease_lost`` if it had started, else
-- ``unstarted``. Written once, here (no claim writes an Attempt row for its own attempt);
-- an open row a claim by the release before #38 inserted is ended in place.
lost AS (
    INSERT INTO {attempt} (occurrence_id, number, fencing_token, replica, trigger,
                           started_at, finished_at, outcome, error_type, error_message)
    SELECT d.id, d.held_number, d.held_token, d.holder, d.held_trigger, d.held_since, %(now)s,
           CASE WHEN d.lapsed THEN %(attempt_lease_lost)s ELSE %(attempt_unstarted)s END, '', ''
    FROM due d
    WHERE d.held AND d.held_number > 0
      AND d.id IN (SELECT id FROM claimed UNION ALL SELECT id FROM exhausted
                   UNION ALL SELECT id FROM forged)
    ON CONFLICT (occurrence_id, fencing_token) DO UPDATE
        SET finished_at = EXCLUDED.finished_at, outcome = EXCLUDED.outcome
        WHERE {attempt}.outcome IN (%(attempt_running)s, %(attempt_claimed)s)
)
SELECT c.id, c.fencing_token AS token, c.schedule_id, c.tenant, c.scheduled_at,
       c.attempts, c.trigger, c.failures, c.args, c.queue, c.was_due, c.claim_order,
       c.lost_by, NULL AS error,
       {run_fields}
FROM claimed c JOIN {schedule} s ON s.id = c.schedule_id
UNION ALL
-- The occurrences a lost attempt dead-lettered, forged ones, and those skipped (for overlap,
-- or enqueued work past its max_delay): nothing to run (no token). Which, in the trigger
-- column; with what the alerts say of them (signals.py).
SELECT e.id, NULL, e.schedule_id, e.tenant, e.scheduled_at, e.attempts, e.why, NULL, NULL,
       NULL, NULL, NULL, NULL, e.error,
       {run_fields}
FROM (SELECT id, schedule_id, tenant, scheduled_at, attempts, %(worker_lost)s AS why,
             last_error_message AS error FROM exhausted
      UNION ALL SELECT id, schedule_id, tenant, scheduled_at, attempts, %(tenant_mismatch)s,
             last_error_message FROM forged
      UNION ALL SELECT id, schedule_id, tenant, scheduled_at, attempts, skip_reason, ''
             FROM overlapped) e
JOIN {schedule} s ON s.id = e.schedule_id
ORDER BY claim_order NULLS LAST, id
