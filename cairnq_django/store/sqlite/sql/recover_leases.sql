-- Recover every expired lease in the table (protocol 3.9 step 2a), any queue,
-- any name. Per row, cancel wins: cancel requested -> canceled; attempts left ->
-- queued for redelivery (progress of the dead attempt cleared); otherwise failed
-- with the lease-expired envelope. Every branch clears the lease.
-- params: lease_expired_error (JSON text), now (process ms)
-- The WHERE repeats the partial index predicate of cairnq_tasks_lease_idx
-- (status = 'running' AND lease_until_ms IS NOT NULL) literally: SQLite only uses
-- a partial index when the query carries each of its terms.
-- A running row with no lease at all (a foreign writer broke the lease
-- invariant) is recovered the same way: nobody can own it, so without this it
-- would stay running forever. The lease index leaves such rows out; they are
-- found among the running rows through cairnq_tasks_status_completed_idx.
UPDATE cairnq_tasks
SET status = CASE
        WHEN cancel_requested_at_ms IS NOT NULL THEN 'canceled'
        WHEN attempt < max_attempts THEN 'queued'
        ELSE 'failed' END,
    worker_id = CASE
        WHEN cancel_requested_at_ms IS NULL AND attempt < max_attempts THEN NULL
        ELSE worker_id END,
    lease_until_ms = NULL,
    run_at_ms = CASE
        WHEN cancel_requested_at_ms IS NULL AND attempt < max_attempts THEN %(now)s
        ELSE run_at_ms END,
    completed_at_ms = CASE
        WHEN cancel_requested_at_ms IS NULL AND attempt < max_attempts THEN completed_at_ms
        ELSE %(now)s END,
    error = CASE
        WHEN cancel_requested_at_ms IS NULL AND attempt >= max_attempts THEN %(lease_expired_error)s
        ELSE error END,
    progress = CASE
        WHEN cancel_requested_at_ms IS NULL AND attempt < max_attempts THEN NULL
        ELSE progress END,
    message = CASE
        WHEN cancel_requested_at_ms IS NULL AND attempt < max_attempts THEN NULL
        ELSE message END,
    updated_at_ms = %(now)s
WHERE id IN (
    SELECT id FROM cairnq_tasks
    WHERE status = 'running'
      AND lease_until_ms IS NOT NULL
      AND lease_until_ms <= %(now)s
    UNION ALL
    SELECT id FROM cairnq_tasks
    WHERE status = 'running'
      AND lease_until_ms IS NULL
)
RETURNING id, status
