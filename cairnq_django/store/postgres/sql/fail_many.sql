-- Fail many owned tasks in ONE statement, each with its own envelope,
-- retryability and delay (3.13 per row, cancel wins); ids missing from the answer lost their lease.
-- params: ids (text[]), errors (text[] of JSON text), retryable (boolean[]), delays (bigint[]), parallel; worker_id
UPDATE cairnq_tasks AS t
-- The CASE arms read the row being updated (t): a cancel committed during the lock wait still wins.
SET status = CASE
        WHEN t.cancel_requested_at_ms IS NOT NULL THEN 'canceled'
        WHEN f.retryable AND t.attempt < t.max_attempts THEN 'queued'
        ELSE 'failed' END,
    error = f.error::jsonb,
    worker_id = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND f.retryable AND t.attempt < t.max_attempts THEN NULL
        ELSE t.worker_id END,
    lease_until_ms = NULL,
    run_at_ms = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND f.retryable AND t.attempt < t.max_attempts
        THEN (extract(epoch from now()) * 1000)::bigint + f.delay_ms
        ELSE t.run_at_ms END,
    completed_at_ms = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND f.retryable AND t.attempt < t.max_attempts THEN NULL
        ELSE (extract(epoch from now()) * 1000)::bigint END,
    progress = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND f.retryable AND t.attempt < t.max_attempts THEN NULL
        ELSE t.progress END,
    message = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND f.retryable AND t.attempt < t.max_attempts THEN NULL
        ELSE t.message END,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
FROM unnest(%(ids)s::text[], %(errors)s::text[], %(retryable)s::boolean[], %(delays)s::bigint[])
    AS f(id, error, retryable, delay_ms)
WHERE t.id = f.id
-- IS TRUE: no index condition, so the rows are found by id (complete_many.sql says why).
  AND (t.status = 'running') IS TRUE
  AND t.worker_id = %(worker_id)s
  AND t.lease_until_ms > (extract(epoch from now()) * 1000)::bigint
RETURNING t.id, t.status
