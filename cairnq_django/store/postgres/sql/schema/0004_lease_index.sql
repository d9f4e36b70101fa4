-- Step 0004_lease_index.sql: partial index over live leases, for lease recovery.
-- No parameters. The predicate is written exactly as the recovery statement
-- writes its WHERE clause, so the planner can prove the index applies.

-- statement: lease index
CREATE INDEX IF NOT EXISTS cairnq_tasks_lease_idx ON cairnq_tasks (lease_until_ms)
    WHERE status = 'running' AND lease_until_ms IS NOT NULL

-- statement: schema version
UPDATE cairnq_meta SET value = '4' WHERE key = 'schema_version'
