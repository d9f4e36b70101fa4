-- Large-row mode, step 1 (pick) of the single-task writes (heartbeat, progress,
-- complete, succeed, fail): the task, if this worker still owns it; no row means LostLease.
-- params: id, worker_id, now (process ms)
SELECT id FROM cairnq_tasks
WHERE id = %(id)s
  AND status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > %(now)s
