-- Finish an owned task whose handler returned (protocol 3.12). Cancel wins: a
-- cancel-requested task ends canceled with result and progress untouched;
-- otherwise succeeded with the result and progress 1.0. message is untouched.
-- params: id, worker_id, result (JSON text or null), now (process ms)
UPDATE cairnq_tasks
SET status = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN 'canceled' ELSE 'succeeded' END,
    result = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN result ELSE %(result)s END,
    progress = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN progress ELSE 1.0 END,
    lease_until_ms = NULL,
    completed_at_ms = %(now)s,
    updated_at_ms = %(now)s
WHERE id = %(id)s
  AND status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > %(now)s
RETURNING *
