-- Re-queue one failed or canceled task under the same id (protocol 3.7).
-- params: id, reset_attempt (0/1), now (process ms)
-- result is kept on purpose; everything describing the last attempt is cleared,
-- lease_until_ms included (lease invariant).
-- The row comes back with the claim's columns: a payload over 256 KiB stays
-- in the database (payload_bytes carries its size; the Task loads it when read).
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
RETURNING id, name, queue, status,
    CASE WHEN length(CAST(payload AS BLOB)) <= 262144 THEN payload END AS payload,
    CASE WHEN length(CAST(payload AS BLOB)) > 262144 THEN length(CAST(payload AS BLOB)) END AS payload_bytes,
    result, error, metadata, progress, message, attempt,
    max_attempts, priority, worker_id, lease_until_ms, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
