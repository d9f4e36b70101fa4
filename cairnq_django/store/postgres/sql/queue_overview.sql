-- Per queue: queued and running tasks, how long its earliest-due task has been due, paused or not, live workers
-- (the metrics view's reading, docs/metrics.md). Answers (queue, queued, running, due_age_ms, paused, live_workers).
-- params: max_queues (distinct queues walked), max_steps (priorities walked per queue)
WITH RECURSIVE clock(now_ms) AS MATERIALIZED (
    SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint
),
-- A loose index scan of cairnq_tasks_claim_idx's leading column: one probe per distinct queue.
walked(queue, step) AS (
    SELECT (SELECT min(queue) FROM cairnq_tasks), 1
    UNION ALL
    SELECT (SELECT queue FROM cairnq_tasks WHERE queue > walked.queue ORDER BY queue LIMIT 1), walked.step + 1
    FROM walked
    WHERE walked.queue IS NOT NULL AND walked.step < %(max_queues)s
),
-- Registered workers refreshed within three of their heartbeat intervals (WorkerQuerySet.live), with their queues.
live_worker(queue) AS MATERIALIZED (
    SELECT served.queue
    FROM cairnq_django_worker AS w
    CROSS JOIN LATERAL jsonb_array_elements_text(w.queues) AS served(queue)
    WHERE w.stopped_at_ms IS NULL
      AND w.last_seen_at_ms + 3 * w.heartbeat_interval_ms >= (SELECT now_ms FROM clock)
),
-- A paused queue, or one a live worker serves, is shown even with no task.
known(queue) AS (
    SELECT queue FROM walked WHERE queue IS NOT NULL
    UNION
    SELECT queue FROM cairnq_django_queue_pause
    UNION
    SELECT queue FROM live_worker
),
-- One probe per distinct queued priority, as next_run_at.sql walks them.
levels(queue, priority, step) AS (
    SELECT known.queue, (
        SELECT priority FROM cairnq_tasks
        WHERE queue = known.queue AND status = 'queued'
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ), 1
    FROM known
    UNION ALL
    SELECT levels.queue, (
        SELECT priority FROM cairnq_tasks
        WHERE queue = levels.queue AND status = 'queued' AND priority < levels.priority
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ), levels.step + 1
    FROM levels
    WHERE levels.priority IS NOT NULL AND levels.step < %(max_steps)s
),
-- Within one priority the index is in run_at order: its first row is that level's earliest.
due(queue, run_at_ms) AS (
    SELECT levels.queue, min(first.run_at_ms)
    FROM levels
    CROSS JOIN LATERAL (
        SELECT run_at_ms FROM cairnq_tasks
        WHERE queue = levels.queue AND status = 'queued' AND priority = levels.priority
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ) AS first
    WHERE levels.priority IS NOT NULL AND first.run_at_ms <= (SELECT now_ms FROM clock)
    GROUP BY levels.queue
)
SELECT known.queue,
    -- Index-only ranges of cairnq_tasks_claim_idx: the live rows, never the terminal ones.
    (SELECT count(*) FROM cairnq_tasks WHERE queue = known.queue AND status = 'queued') AS queued,
    (SELECT count(*) FROM cairnq_tasks WHERE queue = known.queue AND status = 'running') AS running,
    (SELECT now_ms FROM clock) - due.run_at_ms AS due_age_ms,
    EXISTS (SELECT 1 FROM cairnq_django_queue_pause AS p WHERE p.queue = known.queue) AS paused,
    (SELECT count(*) FROM live_worker WHERE live_worker.queue = known.queue) AS live_workers
FROM known
LEFT JOIN due ON due.queue = known.queue
ORDER BY known.queue
