-- Read-only probe before a claim session (protocol 3.9 step 1): is any task
-- claimable now for these queues and names, or has any lease expired anywhere? (due, expired)
-- params: queues (JSON array text), names (JSON array text or null = any name), leaseless (0/1), now (process ms)

-- Two EXISTS, not one OR, so each picks its own index; outside any transaction, never on the write lock.
SELECT
    EXISTS (
        SELECT 1 FROM cairnq_tasks
        WHERE queue IN (
            SELECT value FROM json_each(%(queues)s)
            -- Not a paused queue (docs/limits.md): a test of the queue, not of each row.
            WHERE value NOT IN (SELECT queue FROM cairnq_django_queue_pause)
        )
          AND status = 'queued'
          AND (%(names)s IS NULL OR name IN (SELECT value FROM json_each(%(names)s)))
          AND run_at_ms <= %(now)s
    ) AS due,
    EXISTS (
        SELECT 1 FROM cairnq_tasks
        WHERE status = 'running'
          -- The partial index's predicate, literally: SQLite matches it term by term.
          AND lease_until_ms IS NOT NULL
          AND lease_until_ms <= %(now)s
    -- Running rows without a lease (a foreign writer), read by cairnq_tasks_status_completed_idx.
    ) OR (%(leaseless)s AND EXISTS (
        SELECT 1 FROM cairnq_tasks
        WHERE status = 'running'
          AND lease_until_ms IS NULL
    )) AS expired
