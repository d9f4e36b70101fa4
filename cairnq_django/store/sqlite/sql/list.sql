-- List tasks, newest first (protocol 3.3). Each filter applies only when given.
-- params: status, queue, name, root_id, correlation_id (each text or null), limit, offset
SELECT * FROM cairnq_tasks
WHERE (%(status)s IS NULL OR status = %(status)s)
  AND (%(queue)s IS NULL OR queue = %(queue)s)
  AND (%(name)s IS NULL OR name = %(name)s)
  AND (%(root_id)s IS NULL OR root_id = %(root_id)s)
  AND (%(correlation_id)s IS NULL OR correlation_id = %(correlation_id)s)
ORDER BY created_at_ms DESC, id DESC
LIMIT %(limit)s OFFSET %(offset)s
