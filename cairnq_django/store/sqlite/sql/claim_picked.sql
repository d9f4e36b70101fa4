-- Lease the tasks a fleet-limited pick chose (docs/limits.md) to worker_id and return them (protocol 3.9 step 2b).
-- The pick (claim_limited.sql, claim_limited_keyed.sql) ran in this IMMEDIATE transaction; rows come back in no set order.
-- params: picked (JSON array text of ids), worker_id, lease_ms, now (process ms)
UPDATE cairnq_tasks
SET status = 'running',
    worker_id = %(worker_id)s,
    lease_until_ms = %(now)s + %(lease_ms)s,
    attempt = attempt + 1,
    updated_at_ms = %(now)s
WHERE id IN (SELECT value FROM json_each(%(picked)s))
  -- Unary +: by id, one row per pick; SQLite would otherwise walk every queued row by status.
  AND +status = 'queued'
-- A payload over 256 KiB stays behind; the worker fetches it (get_payload.sql).
RETURNING id, name, queue, status,
    CASE WHEN length(CAST(payload AS BLOB)) <= 262144 THEN payload END AS payload,
    CASE WHEN length(CAST(payload AS BLOB)) > 262144 THEN length(CAST(payload AS BLOB)) END AS payload_bytes,
    result, error, metadata, progress, message, attempt,
    max_attempts, priority, worker_id, lease_until_ms, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
