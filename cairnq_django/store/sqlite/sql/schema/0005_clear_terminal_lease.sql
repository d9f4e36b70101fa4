-- Step 0005_clear_terminal_lease.sql: data fix so that a lease is held if and
-- only if the task is running. No parameters.

-- statement: drop leases left on rows that are not running
UPDATE cairnq_tasks SET lease_until_ms = NULL
WHERE status <> 'running' AND lease_until_ms IS NOT NULL

-- statement: schema version
UPDATE cairnq_meta SET value = '5' WHERE key = 'schema_version'
