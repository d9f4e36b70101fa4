-- Fail an owned task (protocol 3.13); the outcome is decided in the statement,
-- cancel requested -> canceled; retryable with attempts left -> queued at now + delay_ms; else failed.
-- params: id, worker_id, error (JSON text), retryable (boolean), delay_ms
UPDATE cairnq_tasks AS t
SET status = CASE
        WHEN t.cancel_requested_at_ms IS NOT NULL THEN 'canceled'
        WHEN %(retryable)s::boolean AND t.attempt < t.max_attempts THEN 'queued'
        ELSE 'failed' END,
    error = %(error)s::jsonb,
    worker_id = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND %(retryable)s::boolean AND t.attempt < t.max_attempts THEN NULL
        ELSE t.worker_id END,
    -- Every branch clears the lease; attempt stays as the claim counted it.
    lease_until_ms = NULL,
    run_at_ms = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND %(retryable)s::boolean AND t.attempt < t.max_attempts
        THEN (extract(epoch from now()) * 1000)::bigint + %(delay_ms)s::bigint
        ELSE t.run_at_ms END,
    completed_at_ms = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND %(retryable)s::boolean AND t.attempt < t.max_attempts THEN NULL
        ELSE (extract(epoch from now()) * 1000)::bigint END,
    progress = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND %(retryable)s::boolean AND t.attempt < t.max_attempts THEN NULL
        ELSE t.progress END,
    message = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND %(retryable)s::boolean AND t.attempt < t.max_attempts THEN NULL
        ELSE t.message END,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
WHERE t.id = %(id)s
  AND t.status = 'running'
  AND t.worker_id = %(worker_id)s
  AND t.lease_until_ms > (extract(epoch from now()) * 1000)::bigint
-- The claim's columns: a payload over 256 KiB stays behind, payload_bytes gives its size.
RETURNING t.id, t.name, t.queue, t.status,
    CASE WHEN pg_column_size(t.payload)
              <= CASE WHEN pg_column_compression(t.payload) IS NULL THEN 262144 ELSE 8192 END
         THEN t.payload END AS payload,
    CASE WHEN pg_column_size(t.payload)
              > CASE WHEN pg_column_compression(t.payload) IS NULL THEN 262144 ELSE 8192 END
         THEN octet_length(t.payload::text) END AS payload_bytes,
    t.result, t.error, t.metadata, t.progress, t.message, t.attempt,
    t.max_attempts, t.priority, t.worker_id, t.lease_until_ms, t.run_at_ms, t.cancel_requested_at_ms,
    t.parent_id, t.root_id, t.correlation_id, t.created_at_ms, t.updated_at_ms, t.completed_at_ms
