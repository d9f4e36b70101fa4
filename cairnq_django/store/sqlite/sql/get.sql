-- Read one whole task row by id (protocol 3.2).
-- params: id
SELECT * FROM cairnq_tasks WHERE id = %(id)s
