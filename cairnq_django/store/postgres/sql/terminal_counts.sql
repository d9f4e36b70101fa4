-- Per queue, its terminal tasks by status, each count stopping at cap: the
-- dashboard's all-time figures, read from cairnq_tasks_claim_idx's
-- (queue, status) ranges without walking a million finished rows. The
-- statuses are literals so the planner weighs each range by its own statistics,
-- and the index's own order keeps it on that range even where a status is common.
-- params: queues (text[]), cap (int; a count equal to it means "cap or more")
SELECT q.queue AS queue,
    (SELECT count(*) FROM (
        SELECT 1 FROM cairnq_tasks AS t WHERE t.queue = q.queue AND t.status = 'succeeded'
        ORDER BY t.priority DESC, t.run_at_ms, t.id LIMIT %(cap)s
    ) AS c) AS succeeded,
    (SELECT count(*) FROM (
        SELECT 1 FROM cairnq_tasks AS t WHERE t.queue = q.queue AND t.status = 'failed'
        ORDER BY t.priority DESC, t.run_at_ms, t.id LIMIT %(cap)s
    ) AS c) AS failed,
    (SELECT count(*) FROM (
        SELECT 1 FROM cairnq_tasks AS t WHERE t.queue = q.queue AND t.status = 'canceled'
        ORDER BY t.priority DESC, t.run_at_ms, t.id LIMIT %(cap)s
    ) AS c) AS canceled
FROM unnest(%(queues)s::text[]) AS q(queue)
