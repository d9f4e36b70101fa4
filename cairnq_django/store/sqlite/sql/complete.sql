-- Finish an owned task whose handler returned (protocol 3.12). Cancel wins: a
-- cancel-requested task ends canceled, result untouched; else succeeded, progress 1.0.
-- params: id, worker_id, result (JSON text or null), now (process ms)
UPDATE cairnq_tasks
SET status = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN 'canceled' ELSE 'succeeded' END,
    result = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN result ELSE %(result)s END,
    progress = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN progress ELSE 1.0 END,
    lease_until_ms = NULL,
    completed_at_ms = %(now)s,
    updated_at_ms = %(now)s
WHERE id = %(id)s
  AND status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > %(now)s
-- The claim's columns: a payload over 256 KiB stays behind, payload_bytes gives its size.
RETURNING id, name, queue, status,
    CASE WHEN length(CAST(payload AS BLOB)) <= 262144 THEN payload END AS payload,
    CASE WHEN length(CAST(payload AS BLOB)) > 262144 THEN length(CAST(payload AS BLOB)) END AS payload_bytes,
    result, error, metadata, progress, message, attempt,
    max_attempts, priority, worker_id, lease_until_ms, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
