-- Point a key at a new task (protocol 3.1 step 4): insert, or repoint an existing
-- key, touching only task_id and updated_at_ms.
-- params: key, task_id
INSERT INTO cairnq_task_keys (key, task_id, created_at_ms, updated_at_ms)
VALUES (
    %(key)s, %(task_id)s,
    (extract(epoch from now()) * 1000)::bigint,
    (extract(epoch from now()) * 1000)::bigint
)
ON CONFLICT (key) DO UPDATE
SET task_id = excluded.task_id, updated_at_ms = excluded.updated_at_ms
