-- Recover every expired lease in the table (protocol 3.9 step 2a), any queue,
-- any name. Per row, cancel wins: cancel requested -> canceled; attempts left ->
-- queued for redelivery (progress of the dead attempt cleared); otherwise failed
-- with the lease-expired envelope. Every branch clears the lease.
-- params: lease_expired_error (JSON text)
-- The candidates are locked FOR UPDATE SKIP LOCKED in a MATERIALIZED CTE (run
-- once; a re-scanned locking subquery misbehaves inside an UPDATE): a row
-- another worker is recovering, or its owner is settling right now, is skipped
-- and that transaction's outcome stands; no two recoverers deadlock. The clock is
-- a scalar subquery so it bounds a range of the partial cairnq_tasks_lease_idx.
WITH expired AS MATERIALIZED (
    SELECT id FROM cairnq_tasks
    WHERE status = 'running'
      AND lease_until_ms IS NOT NULL
      AND lease_until_ms <= (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint)
    FOR UPDATE SKIP LOCKED
)
UPDATE cairnq_tasks AS t
SET status = CASE
        WHEN t.cancel_requested_at_ms IS NOT NULL THEN 'canceled'
        WHEN t.attempt < t.max_attempts THEN 'queued'
        ELSE 'failed' END,
    worker_id = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND t.attempt < t.max_attempts THEN NULL
        ELSE t.worker_id END,
    lease_until_ms = NULL,
    run_at_ms = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND t.attempt < t.max_attempts
        THEN (extract(epoch from clock_timestamp()) * 1000)::bigint
        ELSE t.run_at_ms END,
    completed_at_ms = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND t.attempt < t.max_attempts THEN t.completed_at_ms
        ELSE (extract(epoch from clock_timestamp()) * 1000)::bigint END,
    error = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND t.attempt >= t.max_attempts
        THEN %(lease_expired_error)s::jsonb
        ELSE t.error END,
    progress = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND t.attempt < t.max_attempts THEN NULL
        ELSE t.progress END,
    message = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND t.attempt < t.max_attempts THEN NULL
        ELSE t.message END,
    updated_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
FROM expired
WHERE t.id = expired.id
RETURNING t.id, t.status
