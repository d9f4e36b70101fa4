-- How long until the earliest waiting task of these queues and names is due:
-- the idle worker sleeps that long at most (protocol 4.13); answers (due_in_ms, name) or no row.
-- params: queues (text[]), names (text[]: those served), max_steps (priorities walked per queue and name)
WITH RECURSIVE clock(now_ms) AS MATERIALIZED (
    SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint
),
-- A loose index scan of cairnq_tasks_claim_name_idx over the rows not yet due: one probe per priority
-- that holds one, each finding that priority's earliest. Rows already due are the claim's business
-- (counting them would make the idle wait a busy loop), and "run_at_ms > now" is tested on each index
-- entry before its row is read: while a held snapshot keeps the entries of every task claimed since,
-- all due, the walk steps over them without reading their rows.
walk(queue, name, priority, run_at_ms, step) AS (
    SELECT wanted.queue, served.name, first.priority, first.run_at_ms, 1
    FROM unnest(%(queues)s::text[]) AS wanted(queue)
    CROSS JOIN unnest(%(names)s::text[]) AS served(name)
    CROSS JOIN LATERAL (
        SELECT priority, run_at_ms FROM cairnq_tasks
        WHERE queue = wanted.queue AND status = 'queued' AND name = served.name
          AND run_at_ms > (SELECT now_ms FROM clock)
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ) AS first
    -- Not a paused queue (docs/limits.md): a test of the queue, not of each row.
    WHERE wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
    UNION ALL
    SELECT walk.queue, walk.name, next.priority, next.run_at_ms, walk.step + 1
    FROM walk
    CROSS JOIN LATERAL (
        SELECT priority, run_at_ms FROM cairnq_tasks
        WHERE queue = walk.queue AND status = 'queued' AND name = walk.name
          AND priority < walk.priority
          AND run_at_ms > (SELECT now_ms FROM clock)
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ) AS next
    WHERE walk.step < %(max_steps)s
)
SELECT walk.run_at_ms - (SELECT now_ms FROM clock) AS due_in_ms, walk.name
FROM walk
ORDER BY walk.run_at_ms
LIMIT 1
