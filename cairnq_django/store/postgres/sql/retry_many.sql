-- Re-queue every listed failed or canceled task in one statement (3.7 per row).
-- params: ids (text[]), reset_attempt (boolean)
UPDATE cairnq_tasks
SET status = 'queued',
    run_at_ms = (extract(epoch from now()) * 1000)::bigint,
    error = NULL,
    worker_id = NULL,
    lease_until_ms = NULL,
    cancel_requested_at_ms = NULL,
    completed_at_ms = NULL,
    progress = NULL,
    message = NULL,
    attempt = CASE WHEN %(reset_attempt)s::boolean THEN 0 ELSE attempt END,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
WHERE id = ANY(%(ids)s::text[]) AND status IN ('failed', 'canceled')
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
