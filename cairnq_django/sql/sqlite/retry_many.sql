-- Re-queue every listed failed or canceled task in one statement (3.7 per row).
-- params: ids (JSON array text), reset_attempt (0/1), now (process ms)
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
WHERE id IN (SELECT value FROM json_each(%(ids)s)) AND status IN ('failed', 'canceled')
RETURNING *
