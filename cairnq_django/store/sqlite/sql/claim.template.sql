-- Draw up to limit claimable tasks in claim order and lease them to worker_id
-- (protocol 3.9 step 2b, 4.3): status running, lease now + lease_ms, attempt + 1.
-- Rendered from claim.template.sql (store/sql_templates.py): claim, claim_one_name (several queues),
-- claim_one_queue, claim_one_queue_one_name (one queue).
-- params: queues (JSON array text) or queue; names (JSON array text or null = any name) or name;
-- worker_id, lease_ms, limit, now (process ms)
UPDATE cairnq_tasks
SET status = 'running',
    worker_id = %(worker_id)s,
    lease_until_ms = %(now)s + %(lease_ms)s,
    attempt = attempt + 1,
    updated_at_ms = %(now)s
-- Inside the claim session's IMMEDIATE transaction: the write lock is held, no claimer races.
-- Large-row mode takes the lines between "WHERE id IN (" and its ")" as the claim's pick (large_rows.py).
WHERE id IN (
-- [many_queues]
    SELECT head.id
    -- Not a paused queue (docs/limits.md): the list is filtered before any task is read.
    FROM (
        SELECT value FROM json_each(%(queues)s)
        WHERE value NOT IN (SELECT queue FROM cairnq_django_queue_pause)
    ) AS wanted
    -- Each queue's head on its own, in index order; "queue IN (list)" would sort the whole backlog.
    JOIN cairnq_tasks AS head ON head.id IN (
        SELECT id FROM cairnq_tasks
        WHERE queue = wanted.value
-- [/many_queues]
-- [one_queue]
    SELECT id FROM cairnq_tasks
    -- Not a paused queue (docs/limits.md): NULL then, an empty index range; read once, not per row.
    WHERE queue = (SELECT %(queue)s WHERE %(queue)s NOT IN (SELECT queue FROM cairnq_django_queue_pause))
-- [/one_queue]
          AND status = 'queued'
-- [names]
          AND (%(names)s IS NULL OR name IN (SELECT value FROM json_each(%(names)s)))
-- [/names]
-- [one_name]
          -- In cairnq_tasks_claim_name_idx order.
          AND name = %(name)s
-- [/one_name]
          AND run_at_ms <= %(now)s
        ORDER BY priority DESC, run_at_ms, id
        LIMIT %(limit)s
-- [many_queues]
    )
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT %(limit)s
-- [/many_queues]
)
-- A payload over 256 KiB stays behind; the worker fetches it (get_payload.sql).
RETURNING id, name, queue, status,
    CASE WHEN length(CAST(payload AS BLOB)) <= 262144 THEN payload END AS payload,
    CASE WHEN length(CAST(payload AS BLOB)) > 262144 THEN length(CAST(payload AS BLOB)) END AS payload_bytes,
    result, error, metadata, progress, message, attempt,
    max_attempts, priority, worker_id, lease_until_ms, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
