-- Statistics: the planner's picture of the occurrence table, refreshed after a large plan.

-- name: estimated_occurrences
-- The planner's estimate of the table's rows (-1 or 0: never analyzed, or empty then).
SELECT GREATEST(c.reltuples, 0)::bigint AS estimated
FROM pg_class c
WHERE c.oid = {occurrence_table}::regclass

-- name: analyze_occurrences
-- SKIP_LOCKED: a replica analyzing already (or autovacuum) is not waited for; its statistics
-- will do.
ANALYZE (SKIP_LOCKED) {occurrence}
