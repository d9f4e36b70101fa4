-- Fill the claim-cost table with finished history: terminal rows in the claimed queue.
-- Parameters: :n, :queue, :name, :now (ms).
-- Statuses rotate through the three terminal states; completion times spread back in time.
WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < :n)
INSERT INTO cairnq_tasks
    (id, name, queue, status, payload, metadata, attempt, max_attempts, priority,
     worker_id, run_at_ms, root_id, created_at_ms, updated_at_ms, completed_at_ms, progress)
SELECT 'task_0HIST' || printf('%021d', x), :name, :queue,
       CASE x % 3 WHEN 0 THEN 'succeeded' WHEN 1 THEN 'failed' ELSE 'canceled' END,
       '{"i": 0}', '{}', 1, 3, 0, 'worker_bench',
       :now - 86400000 - x, 'task_0HIST' || printf('%021d', x),
       :now - 86400000 - x, :now - 86400000 - x, :now - 86400000 - x, 1.0
FROM g
