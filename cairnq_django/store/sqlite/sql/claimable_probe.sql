-- Read-only probe before a claim session (protocol 3.9 step 1): is any task
-- claimable now for these queues and names, or has any lease expired anywhere?
-- params: queues (JSON array text), names (JSON array text or null = any name),
--         leaseless (0/1), now (process ms)
-- The two questions come back as two columns (due, expired): the session runs
-- recover_leases only when a lease has expired, since it would change nothing
-- otherwise. Run outside any transaction so idle workers never queue on the
-- write lock. Two EXISTS rather than one OR: an OR across two index shapes gets
-- no index, while each EXISTS picks its own (cairnq_tasks_claim_idx, and the
-- partial cairnq_tasks_lease_idx, whose predicate is repeated literally so
-- SQLite may use it) and stops at its first row. The lease arm is unfiltered on
-- purpose: recovering any dead worker's task is every worker's job.
-- A running row with no lease at all (a foreign writer broke the lease
-- invariant; nobody can own it) counts as expired too. The partial lease
-- index leaves such rows out, so that arm reads the running rows through
-- cairnq_tasks_status_completed_idx (status leads it): as many as are running
-- now, never the backlog, and only when no real lease has expired and the
-- caller asks (leaseless: a worker asks once per lease period, the time an
-- ordinary lease takes to expire, not on every probe).
SELECT
    EXISTS (
        SELECT 1 FROM cairnq_tasks
        WHERE queue IN (SELECT value FROM json_each(%(queues)s))
          AND status = 'queued'
          AND (%(names)s IS NULL OR name IN (SELECT value FROM json_each(%(names)s)))
          AND run_at_ms <= %(now)s
    ) AS due,
    EXISTS (
        SELECT 1 FROM cairnq_tasks
        WHERE status = 'running'
          AND lease_until_ms IS NOT NULL
          AND lease_until_ms <= %(now)s
    ) OR (%(leaseless)s AND EXISTS (
        SELECT 1 FROM cairnq_tasks
        WHERE status = 'running'
          AND lease_until_ms IS NULL
    )) AS expired
