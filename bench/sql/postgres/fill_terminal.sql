-- Fill the claim-cost table with finished history: terminal rows in the claimed queue.
-- Parameters: n, queue, name.
-- Statuses rotate through the three terminal states; completion times spread back in time.
INSERT INTO cairnq_tasks
    (id, name, queue, status, payload, metadata, attempt, max_attempts, priority,
     worker_id, run_at_ms, root_id, created_at_ms, updated_at_ms, completed_at_ms, progress)
SELECT 'task_0HIST' || lpad(g::text, 21, '0'), %(name)s, %(queue)s,
       (ARRAY['succeeded', 'failed', 'canceled'])[1 + g %% 3],
       '{"i": 0}'::jsonb, '{}'::jsonb, 1, 3, 0, 'worker_bench',
       c.ms - g, 'task_0HIST' || lpad(g::text, 21, '0'), c.ms - g, c.ms - g, c.ms - g, 1.0
FROM generate_series(1, %(n)s) AS g,
     (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 86400000 AS ms) AS c
