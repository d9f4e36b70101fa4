-- Step 0007_purge_status_index.sql: serve purge's status filter in completion
-- order. No parameters.

-- statement: status + completion index
CREATE INDEX IF NOT EXISTS cairnq_tasks_status_completed_idx
    ON cairnq_tasks (status, completed_at_ms)

-- statement: schema version
UPDATE cairnq_meta SET value = '7' WHERE key = 'schema_version'
