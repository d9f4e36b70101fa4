-- Fail an owned task (protocol 3.13); the outcome is decided in the statement,
-- cancel requested -> canceled; retryable with attempts left -> queued at now + delay_ms; else failed.
-- params: id, worker_id, error (JSON text), retryable (0/1), delay_ms, now (process ms)
UPDATE cairnq_tasks
SET status = CASE
        WHEN cancel_requested_at_ms IS NOT NULL THEN 'canceled'
        WHEN %(retryable)s AND attempt < max_attempts THEN 'queued'
        ELSE 'failed' END,
    error = %(error)s,
    worker_id = CASE
        WHEN cancel_requested_at_ms IS NULL AND %(retryable)s AND attempt < max_attempts THEN NULL
        ELSE worker_id END,
    -- Every branch clears the lease; attempt stays as the claim counted it.
    lease_until_ms = NULL,
    run_at_ms = CASE
        WHEN cancel_requested_at_ms IS NULL AND %(retryable)s AND attempt < max_attempts
        THEN %(now)s + %(delay_ms)s
        ELSE run_at_ms END,
    completed_at_ms = CASE
        WHEN cancel_requested_at_ms IS NULL AND %(retryable)s AND attempt < max_attempts THEN NULL
        ELSE %(now)s END,
    progress = CASE
        WHEN cancel_requested_at_ms IS NULL AND %(retryable)s AND attempt < max_attempts THEN NULL
        ELSE progress END,
    message = CASE
        WHEN cancel_requested_at_ms IS NULL AND %(retryable)s AND attempt < max_attempts THEN NULL
        ELSE message END,
    updated_at_ms = %(now)s
WHERE id = %(id)s
  AND status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > %(now)s
-- The claim's columns: a payload over 256 KiB stays behind, payload_bytes gives its size.
RETURNING id, name, queue, status,
    CASE WHEN length(CAST(payload AS BLOB)) <= 262144 THEN payload END AS payload,
    CASE WHEN length(CAST(payload AS BLOB)) > 262144 THEN length(CAST(payload AS BLOB)) END AS payload_bytes,
    result, error, metadata, progress, message, attempt,
    max_attempts, priority, worker_id, lease_until_ms, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
