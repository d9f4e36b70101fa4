-- Complete many owned tasks in one statement, each keeping its own fate.
-- Parameters: :ids (JSON array text, expanded by json_each), :worker, :now (ms).
-- Ownership is checked per row; a cancel request turns that row canceled (cancel wins).
UPDATE cairnq_tasks
SET status = CASE WHEN cancel_requested_at_ms IS NULL THEN 'succeeded' ELSE 'canceled' END,
    progress = CASE WHEN cancel_requested_at_ms IS NULL THEN 1.0 ELSE progress END,
    lease_until_ms = NULL,
    completed_at_ms = :now,
    updated_at_ms = :now
WHERE id IN (SELECT value FROM json_each(:ids))
  AND status = 'running'
  AND worker_id = :worker
  AND lease_until_ms > :now
RETURNING id
