-- Step 0008_claim_due_index.sql: rebuild both claim indexes to order by due time
-- (run_at_ms) and end with id. No parameters. The names stay the same while the
-- shape changes, so the old index must be dropped first: "create if absent"
-- would keep an old shape silently.

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
