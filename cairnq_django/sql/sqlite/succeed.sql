-- Low-level succeed (protocol 3.12): always succeeded, result set, progress 1.0,
-- message replaced only when given. Ignores a cancel request (workers use
-- complete instead).
-- params: id, worker_id, result (JSON text or null), message (text or null), now (process ms)
UPDATE cairnq_tasks
SET status = 'succeeded',
    result = %(result)s,
    progress = 1.0,
    message = COALESCE(%(message)s, message),
    lease_until_ms = NULL,
    completed_at_ms = %(now)s,
    updated_at_ms = %(now)s
WHERE id = %(id)s
  AND status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > %(now)s
RETURNING *
