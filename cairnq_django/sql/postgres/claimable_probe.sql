-- Read-only probe before a claim session (protocol 3.9 step 1): is any task
-- claimable now for these queues and names, or has any lease expired anywhere?
-- params: queues (text[]), names (text[] or null = any name)
-- Two EXISTS rather than one OR so each arm picks its own index
-- (cairnq_tasks_claim_idx / cairnq_tasks_lease_idx) and stops at its first row.
-- The clock is a scalar subquery: evaluated once (an InitPlan) it can bound an
-- index range, while a bare volatile clock_timestamp() would be a per-row filter.
-- The lease arm is deliberately unfiltered: recovering any dead worker's task is
-- every worker's job.
SELECT
    EXISTS (
        SELECT 1 FROM cairnq_tasks
        WHERE queue = ANY(%(queues)s::text[])
          AND status = 'queued'
          AND (%(names)s::text[] IS NULL OR name = ANY(%(names)s::text[]))
          AND run_at_ms <= (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint)
    )
    OR EXISTS (
        SELECT 1 FROM cairnq_tasks
        WHERE status = 'running'
          AND lease_until_ms IS NOT NULL
          AND lease_until_ms <= (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint)
    ) AS has_work
