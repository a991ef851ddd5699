-- Steps of run.once(): what an occurrence already did, across its attempts.

-- name: step_done
SELECT EXISTS (
    SELECT 1 FROM {step} WHERE occurrence_id = %(occurrence)s AND name = %(name)s
) AS done

-- name: record_step
-- Only while the lease is current: a stale token records nothing.
INSERT INTO {step} (occurrence_id, name, fencing_token, done_at)
SELECT o.id, %(name)s, o.fencing_token, %(now)s
FROM {occurrence} o
WHERE o.id = %(id)s AND o.fencing_token = %(token)s
  AND o.lease_owner = %(owner)s AND o.state = %(processing)s
ON CONFLICT (occurrence_id, name) DO NOTHING
RETURNING id
