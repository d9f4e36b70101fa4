-- Cancel one live task (protocol 3.6): queued -> canceled now; running -> stays
-- running with cancel_requested_at_ms re-stamped; terminal or missing rows match nothing.
-- params: id, now (process ms)
UPDATE cairnq_tasks
SET status = CASE WHEN status = 'queued' THEN 'canceled' ELSE status END,
    completed_at_ms = CASE WHEN status = 'queued' THEN %(now)s ELSE completed_at_ms END,
    cancel_requested_at_ms = CASE WHEN status = 'running' THEN %(now)s
                                  ELSE cancel_requested_at_ms END,
    updated_at_ms = %(now)s
WHERE id = %(id)s AND status IN ('queued', 'running')
-- The claim's columns: a payload over 256 KiB stays behind, payload_bytes gives its size.
RETURNING id, name, queue, status,
    CASE WHEN length(CAST(payload AS BLOB)) <= 262144 THEN payload END AS payload,
    CASE WHEN length(CAST(payload AS BLOB)) > 262144 THEN length(CAST(payload AS BLOB)) END AS payload_bytes,
    result, error, metadata, progress, message, attempt,
    max_attempts, priority, worker_id, lease_until_ms, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
