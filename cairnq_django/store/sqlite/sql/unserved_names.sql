-- Names of queued tasks in the worker's queues that none of its handlers
-- serves (protocol 4.3: such rows are never claimed, so the worker warns). Outside any transaction.
-- params: queues (JSON array text), names (JSON array text: those served), max_names (names walked per queue), limit (rows returned)

-- A loose index scan of cairnq_tasks_claim_name_idx: one probe per distinct queued name.
WITH RECURSIVE walk(queue, name, step) AS (
    SELECT wanted.value, (
        SELECT name FROM cairnq_tasks
        WHERE queue = wanted.value AND status = 'queued'
        -- The index's whole order: with ORDER BY name alone the planner may pick cairnq_tasks_name_idx.
        ORDER BY name, priority DESC, run_at_ms, id
        LIMIT 1
    ), 1
    FROM json_each(%(queues)s) AS wanted
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
WHERE name IS NOT NULL AND name NOT IN (SELECT value FROM json_each(%(names)s))
LIMIT %(limit)s
