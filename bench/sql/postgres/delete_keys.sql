-- Empty the key table before a measurement. No parameters.
DELETE FROM cairnq_task_keys
