-- Fill the claim-cost table with tasks backing off: queued, due 30 days or more from now (a cached table stays valid that long).
-- Parameters: n, queue, name.
INSERT INTO cairnq_tasks
    (id, name, queue, status, payload, metadata, attempt, max_attempts, priority,
     run_at_ms, root_id, created_at_ms, updated_at_ms, error)
SELECT 'task_0BACK' || lpad(g::text, 21, '0'), %(name)s, %(queue)s, 'queued',
       '{"i": 0}'::jsonb, '{}'::jsonb, 1, 3, 0,
       c.ms + 2592000000 + g, 'task_0BACK' || lpad(g::text, 21, '0'), c.ms, c.ms,
       '{"type": "Exception", "code": "handler_error", "message": "x", "retryable": true, "details": {}}'::jsonb
FROM generate_series(1, %(n)s) AS g,
     (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms) AS c
