-- The polling probe by key; re-resolves the key each call so it follows a replace.
-- params: key
SELECT t.id, t.status FROM cairnq_task_keys k JOIN cairnq_tasks t ON t.id = k.task_id
WHERE k.key = %(key)s
