-- Read-only probe before a claim session (protocol 3.9 step 1): is any task
-- claimable now for these queues and names, or has any lease expired anywhere?
-- params: queues (text[]), names (text[] or null = any name), leaseless (boolean)
-- The two questions come back as two columns (due, expired): the session runs
-- recover_leases only when a lease has expired, since it would change nothing
-- otherwise. Two EXISTS rather than one OR so each arm picks its own index and
-- stops at its first row. The queued arm looks at each queue on its own (LATERAL
-- over the list) and asks for that queue's first row in claim order: the ORDER BY
-- is what makes the planner walk cairnq_tasks_claim_idx from the head instead of
-- a sequential scan it wrongly believes will meet a due row early (old terminal
-- rows fill the start of the heap). The lease arm reads the partial
-- cairnq_tasks_lease_idx and is deliberately unfiltered: recovering any dead
-- worker's task is every worker's job. The clock is a scalar subquery,
-- evaluated once, so it can bound an index range; a bare volatile
-- clock_timestamp() would be a per-row filter.
-- A running row with no lease at all (a foreign writer broke the lease
-- invariant; nobody can own it) counts as expired too. The partial lease
-- index leaves such rows out, so that arm reads the running rows through
-- cairnq_tasks_status_completed_idx (status leads it): as many as are running
-- now, never the backlog, and only when no real lease has expired and the
-- caller asks (leaseless: a worker asks once per lease period, the time an
-- ordinary lease takes to expire, not on every probe). Its ORDER BY is the
-- index's order, for the reason the queued arm has one: without it the
-- planner expects an early match from a sequential scan of the table. It sits
-- in a subquery because EXISTS drops an ORDER BY ... LIMIT 1 of its own.
SELECT
    EXISTS (
        SELECT 1
        FROM unnest(%(queues)s::text[]) AS wanted(queue)
        CROSS JOIN LATERAL (
            SELECT 1 FROM cairnq_tasks
            WHERE queue = wanted.queue
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
    ) OR (%(leaseless)s::boolean AND EXISTS (
        SELECT 1 FROM (
            SELECT 1 FROM cairnq_tasks
            WHERE status = 'running'
              AND lease_until_ms IS NULL
            ORDER BY completed_at_ms
            LIMIT 1
        ) AS leaseless
    )) AS expired
