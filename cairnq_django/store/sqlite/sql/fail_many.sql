-- Fail many owned tasks in ONE statement, each with its own envelope,
-- retryability and delay (3.13 per row, cancel wins); ids missing from the answer lost their lease.
-- params: items (JSON array text of {"id", "error": JSON text, "retryable": 0/1, "delay_ms"}), worker_id, now (process ms)
UPDATE cairnq_tasks
-- Columns are qualified: the FROM relation also has id and error.
SET status = CASE
        WHEN cairnq_tasks.cancel_requested_at_ms IS NOT NULL THEN 'canceled'
        WHEN f.retryable AND cairnq_tasks.attempt < cairnq_tasks.max_attempts THEN 'queued'
        ELSE 'failed' END,
    error = f.error,
    worker_id = CASE
        WHEN cairnq_tasks.cancel_requested_at_ms IS NULL AND f.retryable AND cairnq_tasks.attempt < cairnq_tasks.max_attempts THEN NULL
        ELSE cairnq_tasks.worker_id END,
    lease_until_ms = NULL,
    run_at_ms = CASE
        WHEN cairnq_tasks.cancel_requested_at_ms IS NULL AND f.retryable AND cairnq_tasks.attempt < cairnq_tasks.max_attempts
        THEN %(now)s + f.delay_ms
        ELSE cairnq_tasks.run_at_ms END,
    completed_at_ms = CASE
        WHEN cairnq_tasks.cancel_requested_at_ms IS NULL AND f.retryable AND cairnq_tasks.attempt < cairnq_tasks.max_attempts THEN NULL
        ELSE %(now)s END,
    progress = CASE
        WHEN cairnq_tasks.cancel_requested_at_ms IS NULL AND f.retryable AND cairnq_tasks.attempt < cairnq_tasks.max_attempts THEN NULL
        ELSE cairnq_tasks.progress END,
    message = CASE
        WHEN cairnq_tasks.cancel_requested_at_ms IS NULL AND f.retryable AND cairnq_tasks.attempt < cairnq_tasks.max_attempts THEN NULL
        ELSE cairnq_tasks.message END,
    updated_at_ms = %(now)s
FROM (
    SELECT json_extract(value, '$.id') AS id,
           json_extract(value, '$.error') AS error,
           json_extract(value, '$.retryable') AS retryable,
           json_extract(value, '$.delay_ms') AS delay_ms
    FROM json_each(%(items)s)
) AS f
WHERE cairnq_tasks.id = f.id
  -- The unary + keeps the planner off the status index: drive the update from the ids.
  AND +cairnq_tasks.status = 'running'
  AND cairnq_tasks.worker_id = %(worker_id)s
  AND cairnq_tasks.lease_until_ms > %(now)s
RETURNING id, status
