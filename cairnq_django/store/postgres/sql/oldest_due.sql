-- How long the earliest-due queued task of each queue has been due (the metrics view's gauge):
-- answers (queue, age_ms), one row per queue with a task due now.
-- params: queues (text[]), max_steps (priorities walked per queue)
WITH RECURSIVE clock(now_ms) AS MATERIALIZED (
    SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint
),
-- A loose index scan of cairnq_tasks_claim_idx: one probe per distinct queued priority.
walk(queue, priority, step) AS (
    SELECT wanted.queue, (
        SELECT priority FROM cairnq_tasks
        WHERE queue = wanted.queue AND status = 'queued'
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ), 1
    FROM unnest(%(queues)s::text[]) AS wanted(queue)
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
SELECT walk.queue, (SELECT now_ms FROM clock) - min(first.run_at_ms) AS age_ms
FROM walk
-- Within one priority the index is in run_at order: its first row is that level's earliest.
CROSS JOIN LATERAL (
    SELECT run_at_ms FROM cairnq_tasks
    WHERE queue = walk.queue AND status = 'queued' AND priority = walk.priority
    ORDER BY priority DESC, run_at_ms, id
    LIMIT 1
) AS first
WHERE walk.priority IS NOT NULL AND first.run_at_ms <= (SELECT now_ms FROM clock)
GROUP BY walk.queue
