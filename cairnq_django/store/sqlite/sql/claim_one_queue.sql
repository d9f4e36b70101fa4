-- Draw up to limit claimable tasks in claim order and lease them to worker_id
-- (protocol 3.9 step 2b, 4.3): status running, lease now + lease_ms, attempt + 1. One queue.
-- params: queue, names (JSON array text or null = any name), worker_id, lease_ms, limit, now (process ms)
UPDATE cairnq_tasks
SET status = 'running',
    worker_id = %(worker_id)s,
    lease_until_ms = %(now)s + %(lease_ms)s,
    attempt = attempt + 1,
    updated_at_ms = %(now)s
-- Inside the claim session's IMMEDIATE transaction: the write lock is held, no claimer races.
WHERE id IN (
    SELECT id FROM cairnq_tasks
    -- Not a paused queue (docs/limits.md): NULL then, an empty index range; read once, not per row.
    WHERE queue = (SELECT %(queue)s WHERE %(queue)s NOT IN (SELECT queue FROM cairnq_django_queue_pause))
      AND status = 'queued'
      AND (%(names)s IS NULL OR name IN (SELECT value FROM json_each(%(names)s)))
      AND run_at_ms <= %(now)s
    ORDER BY priority DESC, run_at_ms, id
    LIMIT %(limit)s
)
-- A payload over 256 KiB stays behind; the worker fetches it (get_payload.sql).
RETURNING id, name, queue, status,
    CASE WHEN length(CAST(payload AS BLOB)) <= 262144 THEN payload END AS payload,
    CASE WHEN length(CAST(payload AS BLOB)) > 262144 THEN length(CAST(payload AS BLOB)) END AS payload_bytes,
    result, error, metadata, progress, message, attempt,
    max_attempts, priority, worker_id, lease_until_ms, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
