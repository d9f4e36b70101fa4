-- Complete many owned tasks in one statement, each keeping its own fate.
-- Parameters: ids (text[]), worker.
-- The ownership check (running, this worker, lease in the future) is per row;
-- a cancel request turns that row canceled instead (cancel wins).
UPDATE cairnq_tasks t
SET status = CASE WHEN t.cancel_requested_at_ms IS NULL THEN 'succeeded' ELSE 'canceled' END,
    progress = CASE WHEN t.cancel_requested_at_ms IS NULL THEN 1.0 ELSE t.progress END,
    lease_until_ms = NULL,
    completed_at_ms = (extract(epoch FROM now()) * 1000)::bigint,
    updated_at_ms = (extract(epoch FROM now()) * 1000)::bigint
FROM unnest(%(ids)s::text[]) AS d(id)
WHERE t.id = d.id
  AND t.status = 'running'
  AND t.worker_id = %(worker)s
  AND t.lease_until_ms > (extract(epoch FROM now()) * 1000)::bigint
RETURNING t.id
