-- Fill the claim-cost table with tasks backing off: queued, due 30 days or more from now (a cached table stays valid that long).
-- Parameters: :n, :queue, :name, :now (ms).
WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < :n)
INSERT INTO cairnq_tasks
    (id, name, queue, status, payload, metadata, attempt, max_attempts, priority,
     run_at_ms, root_id, created_at_ms, updated_at_ms, error)
SELECT 'task_0BACK' || printf('%021d', x), :name, :queue, 'queued', '{"i": 0}', '{}', 1, 3, 0,
       :now + 2592000000 + x, 'task_0BACK' || printf('%021d', x), :now, :now,
       '{"type": "Exception", "code": "handler_error", "message": "x", "retryable": true, "details": {}}'
FROM g
