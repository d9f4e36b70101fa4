-- Step 0008_claim_due_index.sql: rebuild both claim indexes to order by due time
-- (run_at_ms) and end with id (protocol 1.7, 1.8). No parameters. Dropped first: the names
-- stay, and "create if absent" would keep the old shape.

-- statement: drop the old claim index
DROP INDEX IF EXISTS cairnq_tasks_claim_idx

-- statement: claim index, final shape
CREATE INDEX cairnq_tasks_claim_idx
    ON cairnq_tasks (queue, status, priority DESC, run_at_ms, id)

-- statement: drop the old claim-by-name index
DROP INDEX IF EXISTS cairnq_tasks_claim_name_idx

-- statement: claim-by-name index, final shape
CREATE INDEX cairnq_tasks_claim_name_idx
    ON cairnq_tasks (queue, status, name, priority DESC, run_at_ms, id)

-- statement: schema version
UPDATE cairnq_meta SET value = '8' WHERE key = 'schema_version'
