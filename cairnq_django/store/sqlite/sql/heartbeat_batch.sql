-- Renew, in one statement, every listed lease this worker still owns (3.10).
-- params: ids (JSON array text), worker_id, lease_ms, now (process ms)
UPDATE cairnq_tasks
SET lease_until_ms = %(now)s + %(lease_ms)s,
    updated_at_ms = %(now)s
WHERE id IN (SELECT value FROM json_each(%(ids)s))
  -- The unary + keeps the planner off the status index: drive the update from the ids.
  AND +status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > %(now)s
-- Ids missing from the answer were not renewed: the caller reads lease loss from absence.
RETURNING id, cancel_requested_at_ms
