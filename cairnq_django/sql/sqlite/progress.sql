-- Record progress of an owned task (protocol 3.11): each of progress and message
-- is replaced only when given (null keeps the stored value).
-- params: id, worker_id, progress (real or null), message (text or null), now (process ms)
UPDATE cairnq_tasks
SET progress = COALESCE(%(progress)s, progress),
    message = COALESCE(%(message)s, message),
    updated_at_ms = %(now)s
WHERE id = %(id)s
  AND status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > %(now)s
RETURNING *
