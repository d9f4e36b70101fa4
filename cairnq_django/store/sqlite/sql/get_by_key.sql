-- Read the task a key currently points at (protocol 3.2); nothing if the key is
-- unknown or its task was purged.
-- params: key
SELECT t.* FROM cairnq_task_keys k JOIN cairnq_tasks t ON t.id = k.task_id WHERE k.key = %(key)s
