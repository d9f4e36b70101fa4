-- Finish an owned task whose handler returned (protocol 3.12). Cancel wins: a
-- cancel-requested task ends canceled with result and progress untouched;
-- otherwise succeeded with the result and progress 1.0. message is untouched.
-- params: id, worker_id, result (JSON text or null)
-- The row comes back with the claim's columns: a payload over 256 KiB stays
-- in the database (payload_bytes carries its size; the Task loads it when read).
UPDATE cairnq_tasks
SET status = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN 'canceled' ELSE 'succeeded' END,
    result = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN result ELSE %(result)s::jsonb END,
    progress = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN progress ELSE 1.0 END,
    lease_until_ms = NULL,
    completed_at_ms = (extract(epoch from now()) * 1000)::bigint,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
WHERE id = %(id)s
  AND status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > (extract(epoch from now()) * 1000)::bigint
RETURNING id, name, queue, status,
    CASE WHEN pg_column_size(payload)
              <= CASE WHEN pg_column_compression(payload) IS NULL THEN 262144 ELSE 8192 END
         THEN payload END AS payload,
    CASE WHEN pg_column_size(payload)
              > CASE WHEN pg_column_compression(payload) IS NULL THEN 262144 ELSE 8192 END
         THEN octet_length(payload::text) END AS payload_bytes,
    result, error, metadata, progress, message, attempt,
    max_attempts, priority, worker_id, lease_until_ms, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
