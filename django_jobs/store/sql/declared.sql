-- Declared schedules written as a set by jobs sync: thousands of rows per statement.

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
