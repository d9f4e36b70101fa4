-- Step 0006_claim_name_index.sql: per-name claim index, in its first
-- (created_at_ms-ordered) shape; 0008 rebuilds it. No parameters.

-- statement: claim-by-name index, original shape
CREATE INDEX IF NOT EXISTS cairnq_tasks_claim_name_idx
    ON cairnq_tasks (queue, status, name, priority DESC, created_at_ms)

-- statement: schema version
UPDATE cairnq_meta SET value = '6' WHERE key = 'schema_version'
