-- Re-queue one failed or canceled task under the same id (protocol 3.7).
-- params: id, reset_attempt (0/1), now (process ms)
-- result is kept on purpose; everything describing the last attempt is cleared,
-- lease_until_ms included (lease invariant).
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
RETURNING *
