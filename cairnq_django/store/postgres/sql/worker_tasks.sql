-- The tasks a worker is running now, oldest task first (the admin's worker page).
-- params: worker_id, limit. The predicate repeats cairnq_tasks_lease_idx's, so only running rows are read.
SELECT *
FROM cairnq_tasks
WHERE status = 'running' AND lease_until_ms IS NOT NULL
  AND worker_id = %(worker_id)s
ORDER BY id
LIMIT %(limit)s
