-- Record progress of an owned task (protocol 3.11): each of progress and message
-- is replaced only when given (null keeps the stored value).
-- params: id, worker_id, progress (double or null), message (text or null)
UPDATE cairnq_tasks
SET progress = COALESCE(%(progress)s::double precision, progress),
    message = COALESCE(%(message)s::text, message),
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
WHERE id = %(id)s
  AND status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > (extract(epoch from now()) * 1000)::bigint
RETURNING *
