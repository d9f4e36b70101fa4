-- Read-only probe before a claim session (protocol 3.9 step 1): is any task
-- claimable now for these queues and names, or has any lease expired anywhere?
-- One row per queue (queue, paused, due, next_priority, next_run_at_ms, next_id, now_ms, expired), or one row
-- with a null queue when there is none; expired is the same on every row.
-- params: queues (text[]), from_priorities (int[]), from_run_ats (bigint[]), from_ids (text[]) (claim_cursor.py), names (text[] or null = any name), leaseless (boolean), expired_from_ms (bigint)
WITH clock AS MATERIALIZED (
    SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms
),
expired AS MATERIALIZED (
    SELECT (
        -- From expired_from_ms (claim_cursor.ExpiryFloor): the older entries are settled tasks'
        -- running versions, which a held snapshot keeps. The ORDER BY keeps the planner on
        -- cairnq_tasks_lease_idx, the one index whose range that bound narrows; a scalar
        -- subquery, because an EXISTS would drop the ORDER BY and LIMIT.
        SELECT lease_until_ms FROM cairnq_tasks
        WHERE status = 'running'
          AND lease_until_ms IS NOT NULL
          AND lease_until_ms >= %(expired_from_ms)s
          AND lease_until_ms <= (SELECT now_ms FROM clock)
        ORDER BY lease_until_ms
        LIMIT 1
    ) IS NOT NULL
    -- Running rows without a lease (a foreign writer), read by cairnq_tasks_status_completed_idx.
    OR (%(leaseless)s::boolean AND EXISTS (
        SELECT 1 FROM (
            SELECT 1 FROM cairnq_tasks
            WHERE status = 'running'
              AND lease_until_ms IS NULL
            ORDER BY completed_at_ms
            LIMIT 1
        ) AS leaseless
    )) AS expired
),
-- Each queue read where this process's claims of it start (claim_cursor.py), one LATERAL per
-- index range in claim order: an ORDER BY ... LIMIT 1 keeps the planner walking
-- cairnq_tasks_claim_idx in order (an EXISTS would drop both). A paused queue (docs/limits.md) is a test of the queue, not of
-- each row, and none of its rows is read.
queues AS (
    SELECT wanted.queue,
        wanted.queue = ANY(ARRAY(SELECT queue FROM cairnq_django_queue_pause)) AS paused,
        above.id IS NOT NULL OR first.run_at_ms <= (SELECT now_ms FROM clock) OR below.id IS NOT NULL AS due,
        -- Where the cursor can move up to: the cursor's priority's first queued row, due or not
        -- (also the earliest due of that priority), else the first due row above or below it
        -- (no queued row of its priority comes before it).
        CASE WHEN first.id IS NOT NULL THEN wanted.from_priority
             WHEN above.id IS NOT NULL THEN above.priority ELSE below.priority END AS next_priority,
        COALESCE(first.run_at_ms, above.run_at_ms, below.run_at_ms) AS next_run_at_ms,
        COALESCE(first.id, above.id, below.id) AS next_id
    FROM unnest(%(queues)s::text[], %(from_priorities)s::int[], %(from_run_ats)s::bigint[], %(from_ids)s::text[])
        AS wanted(queue, from_priority, from_run_at_ms, from_id)
    LEFT JOIN LATERAL (
        SELECT priority, run_at_ms, id FROM cairnq_tasks
        WHERE queue = wanted.queue AND status = 'queued'
          AND wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
          AND (%(names)s::text[] IS NULL OR name = ANY(%(names)s::text[]))
          AND priority > wanted.from_priority
          AND run_at_ms <= (SELECT now_ms FROM clock)
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ) AS above ON true
    LEFT JOIN LATERAL (
        SELECT run_at_ms, id FROM cairnq_tasks
        WHERE queue = wanted.queue AND status = 'queued'
          AND wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
          AND (%(names)s::text[] IS NULL OR name = ANY(%(names)s::text[]))
          AND priority = wanted.from_priority AND (run_at_ms, id) >= (wanted.from_run_at_ms, wanted.from_id)
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ) AS first ON true
    LEFT JOIN LATERAL (
        SELECT priority, run_at_ms, id FROM cairnq_tasks
        WHERE queue = wanted.queue AND status = 'queued'
          AND wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
          AND (%(names)s::text[] IS NULL OR name = ANY(%(names)s::text[]))
          AND priority < wanted.from_priority
          AND run_at_ms <= (SELECT now_ms FROM clock)
        ORDER BY priority DESC, run_at_ms, id
        LIMIT 1
    ) AS below ON true
)
SELECT queues.queue, queues.paused, queues.next_priority, queues.next_run_at_ms, queues.next_id, clock.now_ms,
    NOT queues.paused AND COALESCE(queues.due, false) AS due,
    expired.expired
FROM clock CROSS JOIN expired LEFT JOIN queues ON true
