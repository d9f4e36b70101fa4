-- Insert one queued task (protocol 3.1); return the values the store does not
-- already know (it builds the returned row from its parameters and these).
-- params: id, name, queue, payload (JSON text), metadata (JSON text), max_attempts, priority, delay_ms, parent_id, root_id, correlation_id, now (process ms)
INSERT INTO cairnq_tasks (
    id, name, queue, status, payload, metadata, max_attempts, priority,
    run_at_ms, parent_id, root_id, correlation_id, created_at_ms, updated_at_ms
) VALUES (
    %(id)s, %(name)s, %(queue)s, 'queued', %(payload)s, %(metadata)s,
    %(max_attempts)s, %(priority)s, %(now)s + %(delay_ms)s,
    %(parent_id)s, %(root_id)s, %(correlation_id)s, %(now)s, %(now)s
)
RETURNING id, created_at_ms, updated_at_ms, run_at_ms
