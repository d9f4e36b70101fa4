-- Count rows per queue and status (protocol 3.4); zero-filling happens in Python.
-- params: queue (text or null = every queue)
SELECT queue, status, count(*) AS n FROM cairnq_tasks
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY queue, status
