-- Insert one queued task, as a protocol v1 submit without a key would.
-- Parameters: id, name, queue, payload (JSON text).
-- Time comes from the database clock (protocol 2.1); attempt takes its DB default.
INSERT INTO cairnq_tasks
    (id, name, queue, status, payload, metadata, max_attempts, priority,
     run_at_ms, root_id, created_at_ms, updated_at_ms)
VALUES
    (%(id)s, %(name)s, %(queue)s, 'queued', %(payload)s::jsonb, '{}'::jsonb, 3, 0,
     (extract(epoch FROM clock_timestamp()) * 1000)::bigint, %(id)s,
     (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
     (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
