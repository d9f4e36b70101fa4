-- The polling probe: only id and status of one task (protocol 3.2).
-- params: id
SELECT id, status FROM cairnq_tasks WHERE id = %(id)s
