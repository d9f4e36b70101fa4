-- Names of queued tasks in the worker's queues that none of its handlers
-- serves (fault plan F18 b: such rows are never claimed, so the worker warns).
-- params: queues (text[]), names (text[]: the names this worker serves),
--         max_names (distinct queued names examined per queue), limit (rows returned)
-- A loose index scan over cairnq_tasks_claim_name_idx (queue, status, name, ...):
-- each step jumps to the next distinct queued name of one queue with a single
-- index probe (name > previous, LIMIT 1), so the cost grows with the number of
-- distinct queued names, never with the backlog. A plain SELECT DISTINCT would
-- read every queued row. The ORDER BY spells out the index's whole order: with
-- ORDER BY name alone the planner may walk cairnq_tasks_name_idx instead and
-- filter for queue and status, reading the whole table for a queue that has
-- no queued row. max_names bounds the walk when a queue holds unusually many
-- distinct names (names past the bound, in name order, go unreported).
WITH RECURSIVE walk(queue, name, step) AS (
    SELECT wanted.queue, (
        SELECT name FROM cairnq_tasks
        WHERE queue = wanted.queue AND status = 'queued'
        ORDER BY name, priority DESC, run_at_ms, id
        LIMIT 1
    ), 1
    FROM unnest(%(queues)s::text[]) AS wanted(queue)
    UNION ALL
    SELECT walk.queue, (
        SELECT name FROM cairnq_tasks
        WHERE queue = walk.queue AND status = 'queued' AND name > walk.name
        ORDER BY name, priority DESC, run_at_ms, id
        LIMIT 1
    ), walk.step + 1
    FROM walk
    WHERE walk.name IS NOT NULL AND walk.step < %(max_names)s
)
SELECT queue, name FROM walk
WHERE name IS NOT NULL AND NOT (name = ANY(%(names)s::text[]))
LIMIT %(limit)s
