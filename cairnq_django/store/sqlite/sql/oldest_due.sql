-- How long the earliest-due queued task of each queue has been due (the metrics view's gauge):
-- answers (queue, age_ms), one row per queue with a task due now.
-- params: queues (JSON array text), max_steps (priorities walked per queue), now (process ms)

-- A loose index scan of cairnq_tasks_claim_idx: one probe per distinct queued priority.
WITH RECURSIVE walk(queue, priority, step) AS (
    SELECT wanted.value, (
        SELECT priority FROM cairnq_tasks
        WHERE queue = wanted.value AND status = 'queued'
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ), 1
    FROM json_each(%(queues)s) AS wanted
    UNION ALL
    SELECT walk.queue, (
        SELECT priority FROM cairnq_tasks
        WHERE queue = walk.queue AND status = 'queued' AND priority < walk.priority
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ), walk.step + 1
    FROM walk
    WHERE walk.priority IS NOT NULL AND walk.step < %(max_steps)s
)
SELECT first.queue, %(now)s - min(first.run_at_ms) AS age_ms
FROM (
    -- Within one priority the index is in run_at order: its first row is that level's earliest.
    SELECT walk.queue, (
        SELECT run_at_ms FROM cairnq_tasks
        WHERE queue = walk.queue AND status = 'queued' AND priority = walk.priority
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ) AS run_at_ms
    FROM walk
    WHERE walk.priority IS NOT NULL
) AS first
WHERE first.run_at_ms <= %(now)s
GROUP BY first.queue
