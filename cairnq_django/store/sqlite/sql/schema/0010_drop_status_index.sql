-- Step 0010_drop_status_index.sql: drop the single-column status index; the
-- (status, completed_at_ms) index of 0007 covers every lookup it could serve.
-- No parameters.

-- statement: drop the status index
DROP INDEX IF EXISTS cairnq_tasks_status_idx

-- statement: schema version
UPDATE cairnq_meta SET value = '10' WHERE key = 'schema_version'
