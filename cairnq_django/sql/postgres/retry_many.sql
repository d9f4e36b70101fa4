-- Re-queue every listed failed or canceled task in one statement (3.7 per row).
-- params: ids (text[]), reset_attempt (boolean)
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
WHERE id = ANY(%(ids)s::text[]) AND status IN ('failed', 'canceled')
RETURNING *
