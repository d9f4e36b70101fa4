-- How long until the earliest waiting task of these queues and names is due:
-- the idle worker sleeps that long at most (protocol 4.13); answers (due_in_ms, name) or no row.
-- params: queues (JSON array text), names (JSON array text: those served), max_steps (priorities walked), now (process ms)

-- A loose index scan of cairnq_tasks_claim_name_idx: one probe per distinct queued priority.
WITH RECURSIVE walk(queue, name, priority, step) AS (
    SELECT wanted.value, served.value, (
        SELECT priority FROM cairnq_tasks
        WHERE queue = wanted.value AND status = 'queued' AND name = served.value
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ), 1
    FROM json_each(%(queues)s) AS wanted, json_each(%(names)s) AS served
    -- Not a paused queue (docs/limits.md): a test of the queue, not of each row.
    WHERE wanted.value NOT IN (SELECT queue FROM cairnq_django_queue_pause)
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
SELECT due.run_at_ms - %(now)s AS due_in_ms, due.name
FROM (
    SELECT walk.name, (
        SELECT run_at_ms FROM cairnq_tasks
        WHERE queue = walk.queue AND status = 'queued' AND name = walk.name
          -- Rows already due are the claim's business; counting them would make the idle wait a busy loop.
          AND priority = walk.priority AND run_at_ms > %(now)s
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ) AS run_at_ms
    FROM walk
    WHERE walk.priority IS NOT NULL
) AS due
WHERE due.run_at_ms IS NOT NULL
ORDER BY due.run_at_ms
LIMIT 1
