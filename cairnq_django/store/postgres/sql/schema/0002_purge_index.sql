-- Step 0002_purge_index.sql: index terminal tasks by completion time, for purge.
-- No parameters.

-- statement: completion index
CREATE INDEX IF NOT EXISTS cairnq_tasks_completed_idx ON cairnq_tasks (completed_at_ms)

-- statement: schema_version is only ever updated, never inserted, after 0001
UPDATE cairnq_meta SET value = '2' WHERE key = 'schema_version'
