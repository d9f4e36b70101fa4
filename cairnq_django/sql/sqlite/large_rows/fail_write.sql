-- Large-row mode, fail step 2 of 3 (write): ../fail.sql without RETURNING,
-- restricted to the task the pick found owned (in this same IMMEDIATE
-- transaction; the ownership test stays as a second guard).
-- params: picked (JSON array text of ids), id, worker_id, error (JSON text), retryable (0/1), delay_ms, now (process ms)
UPDATE cairnq_tasks
SET status = CASE
        WHEN cancel_requested_at_ms IS NOT NULL THEN 'canceled'
        WHEN %(retryable)s AND attempt < max_attempts THEN 'queued'
        ELSE 'failed' END,
    error = %(error)s,
    worker_id = CASE
        WHEN cancel_requested_at_ms IS NULL AND %(retryable)s AND attempt < max_attempts THEN NULL
        ELSE worker_id END,
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
  AND id IN (SELECT value FROM json_each(%(picked)s))
