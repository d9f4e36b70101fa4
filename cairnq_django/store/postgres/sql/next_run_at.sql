-- How long until the earliest waiting task of these queues and names is due:
-- the idle worker sleeps that long at most (protocol 4.13); answers (due_in_ms, name) or no row.
-- params: queues (text[]), names (text[]: those served), max_steps (priorities walked per queue and name)
WITH RECURSIVE clock(now_ms) AS MATERIALIZED (
    SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint
),
-- A loose index scan of cairnq_tasks_claim_name_idx: one probe per distinct queued priority.
walk(queue, name, priority, step) AS (
    SELECT wanted.queue, served.name, (
        SELECT priority FROM cairnq_tasks
        WHERE queue = wanted.queue AND status = 'queued' AND name = served.name
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ), 1
    FROM unnest(%(queues)s::text[]) AS wanted(queue)
    CROSS JOIN unnest(%(names)s::text[]) AS served(name)
    -- Not a paused queue (docs/limits.md): a test of the queue, not of each row.
    WHERE wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
    UNION ALL
    SELECT walk.queue, walk.name, (
        SELECT priority FROM cairnq_tasks
        WHERE queue = walk.queue AND status = 'queued' AND name = walk.name
          AND priority < walk.priority
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ), walk.step + 1
    FROM walk
    WHERE walk.priority IS NOT NULL AND walk.step < %(max_steps)s
)
SELECT waiting.run_at_ms - (SELECT now_ms FROM clock) AS due_in_ms, walk.name
FROM walk
CROSS JOIN LATERAL (
    SELECT run_at_ms FROM cairnq_tasks
    WHERE queue = walk.queue AND status = 'queued' AND name = walk.name
      AND priority = walk.priority
      -- Rows already due are the claim's business; counting them would make the idle wait a busy loop.
      AND run_at_ms > (SELECT now_ms FROM clock)
    ORDER BY priority DESC, run_at_ms, id
    LIMIT 1
) AS waiting
WHERE walk.priority IS NOT NULL
ORDER BY waiting.run_at_ms
LIMIT 1
