-- Recover every expired lease in the table (protocol 3.9 step 2a), any queue,
-- any name; cancel wins, attempts left -> queued, else failed with the lease-expired envelope.
-- params: lease_expired_error (JSON text), now (process ms)
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
-- The partial lease index's predicate, literally (SQLite matches it term by term); then leaseless rows.
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
RETURNING id, status, queue, name
