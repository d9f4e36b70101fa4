-- Insert many unkeyed queued tasks in one statement (submit_many).
-- params: rows (JSON array text; each element an object with id, name, queue,
--         payload and metadata as JSON *text*, max_attempts, priority, delay_ms,
--         parent_id, root_id, correlation_id)
-- One jsonb parameter instead of N x 11 placeholders keeps the statement text
-- fixed whatever the batch size. payload/metadata travel as strings holding the
-- already-encoded JSON, so ->> hands back exactly the caller's text.
INSERT INTO cairnq_tasks (
    id, name, queue, status, payload, metadata, max_attempts, priority,
    run_at_ms, parent_id, root_id, correlation_id, created_at_ms, updated_at_ms
)
SELECT
    r->>'id', r->>'name', r->>'queue', 'queued', (r->>'payload')::jsonb,
    (r->>'metadata')::jsonb, (r->>'max_attempts')::integer, (r->>'priority')::integer,
    (extract(epoch from clock_timestamp()) * 1000)::bigint + (r->>'delay_ms')::bigint,
    r->>'parent_id', r->>'root_id', r->>'correlation_id',
    (extract(epoch from clock_timestamp()) * 1000)::bigint,
    (extract(epoch from clock_timestamp()) * 1000)::bigint
FROM jsonb_array_elements(%(rows)s::jsonb) AS r
RETURNING *
