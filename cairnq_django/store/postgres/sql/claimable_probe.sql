-- Read-only probe before a claim session (protocol 3.9 step 1): is any task
-- claimable now for these queues and names, or has any lease expired anywhere? (due, expired)
-- params: queues (text[]), names (text[] or null = any name), leaseless (boolean)
SELECT
    EXISTS (
        SELECT 1
        FROM unnest(%(queues)s::text[]) AS wanted(queue)
        -- Each queue's first row in claim order: the ORDER BY makes the planner walk cairnq_tasks_claim_idx.
        CROSS JOIN LATERAL (
            -- Unfiltered by queue on purpose: recovering any dead worker's task is every worker's job.
            SELECT 1 FROM cairnq_tasks
            WHERE queue = wanted.queue
              -- Not a paused queue (docs/limits.md): a test of the queue, not of each row.
              AND wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
              AND status = 'queued'
              AND (%(names)s::text[] IS NULL OR name = ANY(%(names)s::text[]))
              AND run_at_ms <= (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint)
            ORDER BY priority DESC, run_at_ms, id
            LIMIT 1
        ) AS due
    ) AS due,
    EXISTS (
        SELECT 1 FROM cairnq_tasks
        WHERE status = 'running'
          AND lease_until_ms IS NOT NULL
          AND lease_until_ms <= (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint)
    -- Running rows without a lease (a foreign writer), read by cairnq_tasks_status_completed_idx.
    ) OR (%(leaseless)s::boolean AND EXISTS (
        SELECT 1 FROM (
            SELECT 1 FROM cairnq_tasks
            WHERE status = 'running'
              AND lease_until_ms IS NULL
            ORDER BY completed_at_ms
            LIMIT 1
        ) AS leaseless
    )) AS expired
