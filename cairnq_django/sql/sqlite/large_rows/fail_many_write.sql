-- Large-row mode, fail_many step 2 (write): ../fail_many.sql without RETURNING,
-- restricted to the tasks the pick found owned (in this same IMMEDIATE
-- transaction; the ownership test stays as a second guard).
-- params: picked (JSON array text of ids), items (JSON array text of {"id", "error": JSON text, "retryable": 0/1,
--         "delay_ms"}), worker_id, now (process ms)
UPDATE cairnq_tasks
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
  AND +cairnq_tasks.status = 'running'
  AND cairnq_tasks.worker_id = %(worker_id)s
  AND cairnq_tasks.lease_until_ms > %(now)s
  AND cairnq_tasks.id IN (SELECT value FROM json_each(%(picked)s))
