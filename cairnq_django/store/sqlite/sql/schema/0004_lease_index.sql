-- Step 0004_lease_index.sql: partial index over live leases, for lease recovery.
-- No parameters (protocol 1.7). The predicate's terms stay literally as recover_leases.sql writes
-- them: SQLite matches partial-index terms syntactically. (0003 is PostgreSQL's NOTIFY trigger.)

-- statement: lease index
CREATE INDEX IF NOT EXISTS cairnq_tasks_lease_idx ON cairnq_tasks (lease_until_ms)
    WHERE status = 'running' AND lease_until_ms IS NOT NULL

-- statement: schema version
UPDATE cairnq_meta SET value = '4' WHERE key = 'schema_version'
