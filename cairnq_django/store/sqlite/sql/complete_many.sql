-- Complete many owned tasks in ONE statement (complete semantics of 3.12 per row):
-- one statement and one commit per batch; ids missing from the answer lost their lease.
-- params: items (JSON array text of {"id": ..., "result": JSON text or null}), worker_id, now (process ms)
UPDATE cairnq_tasks
-- Columns are qualified: the FROM relation also has id and result.
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
  -- The unary + keeps the planner off the status index: drive the update from the ids.
  AND +cairnq_tasks.status = 'running'
  AND cairnq_tasks.worker_id = %(worker_id)s
  AND cairnq_tasks.lease_until_ms > %(now)s
RETURNING id, status
