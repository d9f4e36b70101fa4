-- Re-queue one failed or canceled task under the same id (protocol 3.7).
-- params: id, reset_attempt (0/1), now (process ms)
UPDATE cairnq_tasks
SET status = 'queued',
    run_at_ms = %(now)s,
    error = NULL,
    worker_id = NULL,
    lease_until_ms = NULL,
    cancel_requested_at_ms = NULL,
    completed_at_ms = NULL,
    progress = NULL,
    message = NULL,
    attempt = CASE WHEN %(reset_attempt)s THEN 0 ELSE attempt END,
    updated_at_ms = %(now)s
WHERE id = %(id)s AND status IN ('failed', 'canceled')
-- result is kept; the last attempt's state and lease are cleared. A large payload stays behind.
RETURNING id, name, queue, status,
    CASE WHEN length(CAST(payload AS BLOB)) <= 262144 THEN payload END AS payload,
    CASE WHEN length(CAST(payload AS BLOB)) > 262144 THEN length(CAST(payload AS BLOB)) END AS payload_bytes,
    result, error, metadata, progress, message, attempt,
    max_attempts, priority, worker_id, lease_until_ms, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
