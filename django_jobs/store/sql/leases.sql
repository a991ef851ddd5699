-- Leases: renewing, starting and holding a claimed occurrence, each fenced by its token.

-- name: renew
-- Rows another transaction has locked (in practice the holder's own run.atomic()) are not
-- waited for: returned still held (renewed false) but not extended.
WITH free AS (
    SELECT o.id
    FROM {occurrence} o JOIN unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)
        ON o.id = t.id
    WHERE o.fencing_token = t.token AND o.lease_owner = %(owner)s
      AND o.state = %(processing)s
    FOR NO KEY UPDATE OF o SKIP LOCKED
),
renewed AS (
    UPDATE {occurrence} o SET lease_expires_at = %(expires)s, due_at = %(expires)s
    FROM free WHERE o.id = free.id
    RETURNING o.id
)
SELECT id, true AS renewed FROM renewed
UNION ALL
SELECT o.id, false
FROM {occurrence} o JOIN unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)
    ON o.id = t.id
WHERE o.fencing_token = t.token AND o.lease_owner = %(owner)s
  AND o.state = %(processing)s
  AND o.id NOT IN (SELECT id FROM free)

-- name: mark_started
-- synchronous_commit off for this one statement: see mark_started. The rows are locked in
-- occurrence order, so two of these statements never wait for each other in a cycle.
WITH started AS (
    SELECT o.id FROM {occurrence} o
    JOIN unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS t(id, token)
        ON o.id = t.id AND o.fencing_token = t.token
    WHERE o.state = %(processing)s AND o.attempt_started_at IS NULL
    ORDER BY o.id
    FOR NO KEY UPDATE OF o
)
UPDATE {occurrence} o SET attempt_started_at = %(now)s
FROM started
WHERE o.id = started.id
  AND set_config('synchronous_commit', 'off', true) IS NOT NULL
RETURNING o.id AS occurrence_id

-- name: hold
SELECT 1 AS held FROM {occurrence}
WHERE id = %(id)s AND fencing_token = %(token)s
  AND lease_owner = %(owner)s AND state = %(processing)s
FOR UPDATE
