-- Large-row mode, complete_many step 2 (write): ../complete_many.sql without RETURNING,
-- restricted to the tasks the pick found owned (in this same IMMEDIATE
-- transaction; the ownership test stays as a second guard).
-- params: picked (JSON array text of ids), items (JSON array text of {"id": ..., "result": JSON text or null}),
--         worker_id, now (process ms)
UPDATE cairnq_tasks
SET status = CASE WHEN cairnq_tasks.cancel_requested_at_ms IS NOT NULL
                  THEN 'canceled' ELSE 'succeeded' END,
    result = CASE WHEN cairnq_tasks.cancel_requested_at_ms IS NOT NULL
                  THEN cairnq_tasks.result ELSE r.result END,
    progress = CASE WHEN cairnq_tasks.cancel_requested_at_ms IS NOT NULL
                    THEN cairnq_tasks.progress ELSE 1.0 END,
    lease_until_ms = NULL,
    completed_at_ms = %(now)s,
    updated_at_ms = %(now)s
FROM (
    SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.result') AS result
    FROM json_each(%(items)s)
) AS r
WHERE cairnq_tasks.id = r.id
  AND +cairnq_tasks.status = 'running'
  AND cairnq_tasks.worker_id = %(worker_id)s
  AND cairnq_tasks.lease_until_ms > %(now)s
  AND cairnq_tasks.id IN (SELECT value FROM json_each(%(picked)s))
