-- List tasks, newest first (protocol 3.3). Each filter applies only when given.
-- params: status, queue, name, root_id, correlation_id (each text or null), limit, offset
SELECT * FROM cairnq_tasks
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
  AND (%(root_id)s::text IS NULL OR root_id = %(root_id)s::text)
  AND (%(correlation_id)s::text IS NULL OR correlation_id = %(correlation_id)s::text)
ORDER BY created_at_ms DESC, id DESC
LIMIT %(limit)s OFFSET %(offset)s
