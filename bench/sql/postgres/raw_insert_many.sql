-- Insert many queued tasks in one statement.
-- Parameters: ids (text[]), payloads (text[] of JSON), name, queue.
-- unnest() walks the two arrays in step; one clock reading serves every row.
INSERT INTO cairnq_tasks
    (id, name, queue, status, payload, metadata, max_attempts, priority,
     run_at_ms, root_id, created_at_ms, updated_at_ms)
SELECT r.id, %(name)s, %(queue)s, 'queued', r.payload::jsonb, '{}'::jsonb, 3, 0,
       c.ms, r.id, c.ms, c.ms
FROM unnest(%(ids)s::text[], %(payloads)s::text[]) AS r(id, payload),
     (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms) AS c
