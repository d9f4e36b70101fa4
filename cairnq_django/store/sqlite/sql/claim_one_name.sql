-- Draw up to limit claimable tasks in claim order and lease them to worker_id
-- (protocol 3.9 step 2b): status running, lease now + lease_ms, attempt + 1.
-- params: queues (JSON array text), name, worker_id, lease_ms, limit, now (process ms)
-- Several queues, exactly one name (per-name draws): each queue reads cairnq_tasks_claim_name_idx in order.
-- "queue IN (list)" cannot be read from the claim indexes in claim order: the
-- planner would read every queued row of those queues (backing-off ones
-- included) and sort them. Instead each listed queue's head is read on its own,
-- in index order, by a correlated subquery that stops after limit rows, and
-- only those heads are merged and sorted. Runs inside the claim session's
-- IMMEDIATE transaction, which already holds the single write lock, so the
-- selection cannot race another claimer.
-- The payload comes back only when small: one longer than 256 KiB stays in the
-- database, payload is null and payload_bytes carries its size instead, for
-- the byte budget (protocol 4.6); the worker fetches it by id (get_payload.sql)
-- when the handler needs it, one task at a time. A claim of several 50 MB rows
-- would otherwise hold every payload in the worker at once, three times over
-- (SQLite's buffer, the text, the decoded object). The sizes are read from the
-- value the UPDATE already loaded, at no extra cost. Columns are listed because
-- * carries the payload.
UPDATE cairnq_tasks
SET status = 'running',
    worker_id = %(worker_id)s,
    lease_until_ms = %(now)s + %(lease_ms)s,
    attempt = attempt + 1,
    updated_at_ms = %(now)s
WHERE id IN (
    SELECT head.id
    FROM json_each(%(queues)s) AS wanted
    JOIN cairnq_tasks AS head ON head.id IN (
        SELECT id FROM cairnq_tasks
        WHERE queue = wanted.value
          AND status = 'queued'
          AND name = %(name)s
          AND run_at_ms <= %(now)s
        ORDER BY priority DESC, run_at_ms, id
        LIMIT %(limit)s
    )
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT %(limit)s
)
RETURNING id, name, queue, status,
    CASE WHEN length(CAST(payload AS BLOB)) <= 262144 THEN payload END AS payload,
    CASE WHEN length(CAST(payload AS BLOB)) > 262144 THEN length(CAST(payload AS BLOB)) END AS payload_bytes,
    result, error, metadata, progress, message, attempt,
    max_attempts, priority, worker_id, lease_until_ms, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
