-- Hand owned running tasks back (worker drain deadline) without counting the
-- attempt: queued now, owner, lease and progress cleared, attempt decremented; cancel wins.
-- params: ids (JSON array text), worker_id, now (process ms)
UPDATE cairnq_tasks
SET status = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN 'canceled' ELSE 'queued' END,
    worker_id = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN worker_id ELSE NULL END,
    lease_until_ms = NULL,
    run_at_ms = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN run_at_ms ELSE %(now)s END,
    completed_at_ms = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN %(now)s ELSE NULL END,
    progress = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN progress ELSE NULL END,
    message = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN message ELSE NULL END,
    attempt = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN attempt
                   ELSE max(attempt - 1, 0) END,
    updated_at_ms = %(now)s
WHERE id IN (SELECT value FROM json_each(%(ids)s))
  -- The unary + keeps the planner off the status index: drive the update from the ids.
  AND +status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > %(now)s
RETURNING id
