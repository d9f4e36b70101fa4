-- Record progress of an owned task (protocol 3.11): each of progress and message
-- is replaced only when given (null keeps the stored value).
-- params: id, worker_id, progress (double or null), message (text or null)
UPDATE cairnq_tasks
SET progress = COALESCE(%(progress)s::double precision, progress),
    message = COALESCE(%(message)s::text, message),
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
WHERE id = %(id)s
  AND status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > (extract(epoch from now()) * 1000)::bigint
-- The claim's columns: a payload over 256 KiB stays behind, payload_bytes gives its size.
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
