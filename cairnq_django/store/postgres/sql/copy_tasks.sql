-- Stream many unkeyed queued tasks into cairnq_tasks (submit_many, psycopg 3).
-- params: none; COPY rows of id, name, queue, status, payload, metadata, max_attempts, priority,
--   run_at_ms, parent_id, root_id, correlation_id, created_at_ms, updated_at_ms (clock: now_ms.sql)
COPY cairnq_tasks (
    id, name, queue, status, payload, metadata, max_attempts, priority,
    run_at_ms, parent_id, root_id, correlation_id, created_at_ms, updated_at_ms
) FROM STDIN
