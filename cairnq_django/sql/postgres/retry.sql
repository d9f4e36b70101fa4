-- Re-queue one failed or canceled task under the same id (protocol 3.7).
-- params: id, reset_attempt (boolean)
-- result is kept on purpose; everything describing the last attempt is cleared,
-- lease_until_ms included (lease invariant).
UPDATE cairnq_tasks
SET status = 'queued',
    run_at_ms = (extract(epoch from now()) * 1000)::bigint,
    error = NULL,
    worker_id = NULL,
    lease_until_ms = NULL,
    cancel_requested_at_ms = NULL,
    completed_at_ms = NULL,
    progress = NULL,
    message = NULL,
    attempt = CASE WHEN %(reset_attempt)s::boolean THEN 0 ELSE attempt END,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
WHERE id = %(id)s AND status IN ('failed', 'canceled')
RETURNING *
