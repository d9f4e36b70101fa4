-- Insert one queued task (protocol 3.1); return the values the database chose.
-- params: id, name, queue, payload (JSON text), metadata (JSON text), max_attempts,
--   priority, delay_ms, parent_id, root_id, correlation_id
INSERT INTO cairnq_tasks (
    id, name, queue, status, payload, metadata, max_attempts, priority,
    run_at_ms, parent_id, root_id, correlation_id, created_at_ms, updated_at_ms
) VALUES (
    %(id)s, %(name)s, %(queue)s, 'queued', %(payload)s::jsonb, %(metadata)s::jsonb,
    %(max_attempts)s, %(priority)s,
    (extract(epoch from clock_timestamp()) * 1000)::bigint + %(delay_ms)s::bigint,
    %(parent_id)s, %(root_id)s, %(correlation_id)s,
    (extract(epoch from clock_timestamp()) * 1000)::bigint,
    (extract(epoch from clock_timestamp()) * 1000)::bigint
)
-- Only the stamps: the store builds the row from its parameters (attempt is the column default).
RETURNING id, created_at_ms, updated_at_ms, run_at_ms
