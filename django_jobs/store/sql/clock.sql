-- The database's clock.

-- name: database_clock
-- clock_timestamp(), not the now() frozen for the length of a transaction.
SELECT clock_timestamp() AS now
