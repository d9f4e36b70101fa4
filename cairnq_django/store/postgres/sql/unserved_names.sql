-- Names of queued tasks in the worker's queues that none of its handlers
-- serves (protocol 4.3: such rows are never claimed, so the worker warns).
-- params: queues (text[]), names (text[]: those served), max_names (names walked per queue), limit (rows returned)

-- A loose index scan of cairnq_tasks_claim_name_idx: one probe per distinct queued name.
WITH RECURSIVE walk(queue, name, step) AS (
    SELECT wanted.queue, (
        SELECT name FROM cairnq_tasks
        WHERE queue = wanted.queue AND status = 'queued'
        -- The index's whole order: with ORDER BY name alone the planner may pick cairnq_tasks_name_idx.
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
