-- bench/big_table.py: rows lo..hi of its n finished tasks (issue 21's 10 million), one chunk a statement.
-- Parameters: lo, hi, n, now (epoch ms).
-- Of every 100: 95 succeeded, 4 failed, 1 canceled; an eighth each in queues bench (the drain's), due (the
-- claim's), q2-q7. The two claimed queues' rows are named bench.noop, the rest bench.job0-39 (admin
-- filters). Completions run oldest first over the 30 days before now - 1 hour: a one-hour retention
-- purges all of them and none of the run's own tasks. Ids sort by completion, like ULIDs.
INSERT INTO cairnq_tasks
    (id, name, queue, status, payload, result, error, metadata, attempt, max_attempts, priority,
     worker_id, run_at_ms, root_id, created_at_ms, updated_at_ms, completed_at_ms, progress)
SELECT g.id,
       CASE WHEN g.i %% 8 < 2 THEN 'bench.noop' ELSE 'bench.job' || (g.i %% 40) END,
       CASE g.i %% 8 WHEN 0 THEN 'bench' WHEN 1 THEN 'due' ELSE 'q' || (g.i %% 8) END,
       g.status,
       jsonb_build_object('n', g.i, 'to', 'user' || g.i || '@example.com'),
       CASE WHEN g.status = 'succeeded' THEN '{"ok": true}'::jsonb END,
       CASE WHEN g.status = 'failed' THEN
           '{"type": "ValueError", "code": "handler_error", "message": "boom", "retryable": true, "details": {}}'::jsonb
       END,
       '{}'::jsonb, 1, 3, 0, 'worker_bench',
       g.done - 1000, g.id, g.done - 1000, g.done, g.done,
       CASE WHEN g.status = 'succeeded' THEN 1.0 END
FROM (
    SELECT s.i, s.done, s.status,
           'task_' || lpad(s.done::text, 14, '0') || lpad(s.i::text, 12, '0') AS id
    FROM (
        SELECT i,
               %(now)s::bigint - 3600000 - (%(n)s::bigint - i) * (2592000000 / %(n)s::bigint) AS done,
               CASE WHEN i %% 100 < 4 THEN 'failed' WHEN i %% 100 = 4 THEN 'canceled' ELSE 'succeeded' END AS status
        FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS i
    ) AS s
) AS g
