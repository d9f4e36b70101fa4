-- Insert many unkeyed queued tasks in one statement (submit_many).
-- params: rows (JSON array text of objects: id, name, queue, max_attempts, priority, delay_ms,
--   parent_id, root_id, correlation_id, and payload and metadata as JSON objects)
INSERT INTO cairnq_tasks (
    id, name, queue, status, payload, metadata, max_attempts, priority,
    run_at_ms, parent_id, root_id, correlation_id, created_at_ms, updated_at_ms
)
SELECT
    r->>'id', r->>'name', r->>'queue', 'queued', r->'payload', r->'metadata',
    (r->>'max_attempts')::integer, (r->>'priority')::integer,
    clock.now_ms + (r->>'delay_ms')::bigint,
    r->>'parent_id', r->>'root_id', r->>'correlation_id', clock.now_ms, clock.now_ms
-- One jsonb parameter keeps the text fixed whatever the batch size; one clock reading for the batch.
FROM jsonb_array_elements(%(rows)s::jsonb) AS r,
     (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms) AS clock
RETURNING id, created_at_ms, updated_at_ms, run_at_ms
