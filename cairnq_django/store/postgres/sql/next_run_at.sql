-- How long until the earliest waiting task of these queues and names is due:
-- the idle worker sleeps that long at most, so a delayed task or a retry
-- backoff starts on time rather than at the end of a poll interval.
-- params: queues (text[]), names (text[]: the names this worker serves),
--         max_steps (distinct priorities examined per queue and name)
-- Answers one row, due_in_ms (milliseconds on the database clock, at least 1)
-- and the name of that task (the worker draws its source first), or no row
-- when nothing is waiting. Rows already due are left out on purpose: they are
-- the claim's business, and one a claim cannot take yet (a full name or
-- resource) must not turn the idle wait into a busy loop.
-- A loose index scan over cairnq_tasks_claim_name_idx (queue, status, name,
-- priority DESC, run_at_ms, id): for each queue and name the walk jumps from
-- one distinct queued priority to the next with one index probe, and within a
-- priority the first row past the clock is one more probe, so the cost grows
-- with the number of priorities in use, never with the backlog. max_steps
-- bounds the walk (priorities past it go unseen; the poll interval still
-- covers them). The clock is read once, in a materialized CTE. The only sort
-- is of the walk's few rows, one per queue, name and priority.
WITH RECURSIVE clock(now_ms) AS MATERIALIZED (
    SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint
),
walk(queue, name, priority, step) AS (
    SELECT wanted.queue, served.name, (
        SELECT priority FROM cairnq_tasks
        WHERE queue = wanted.queue AND status = 'queued' AND name = served.name
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ), 1
    FROM unnest(%(queues)s::text[]) AS wanted(queue)
    CROSS JOIN unnest(%(names)s::text[]) AS served(name)
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
      AND run_at_ms > (SELECT now_ms FROM clock)
    ORDER BY priority DESC, run_at_ms, id
    LIMIT 1
) AS waiting
WHERE walk.priority IS NOT NULL
ORDER BY waiting.run_at_ms
LIMIT 1
