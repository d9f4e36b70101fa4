-- Step 0009_purge_queue_index.sql: partial index over terminal tasks by queue,
-- for purge's queue filter. No parameters. The IN list is written the way the
-- purge statement writes it, so SQLite can match the partial predicate.

-- statement: queue + completion index over terminal rows
CREATE INDEX IF NOT EXISTS cairnq_tasks_queue_completed_idx
    ON cairnq_tasks (queue, completed_at_ms)
    WHERE status IN ('succeeded', 'failed', 'canceled')

-- statement: schema version
UPDATE cairnq_meta SET value = '9' WHERE key = 'schema_version'
