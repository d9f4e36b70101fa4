-- Draw up to limit claimable tasks in claim order and lease them to worker_id
-- (protocol 3.9 step 2b): status running, lease now + lease_ms, attempt + 1.
-- params: queue, names (JSON array text or null = any name), worker_id, lease_ms, limit, now (process ms)
-- One queue: the equality lets cairnq_tasks_claim_idx be read in claim order.
-- Runs inside the claim session's IMMEDIATE transaction, which already holds
-- the single write lock, so the selection cannot race another claimer.
UPDATE cairnq_tasks
SET status = 'running',
    worker_id = %(worker_id)s,
    lease_until_ms = %(now)s + %(lease_ms)s,
    attempt = attempt + 1,
    updated_at_ms = %(now)s
WHERE id IN (
    SELECT id FROM cairnq_tasks
    WHERE queue = %(queue)s
      AND status = 'queued'
      AND (%(names)s IS NULL OR name IN (SELECT value FROM json_each(%(names)s)))
      AND run_at_ms <= %(now)s
    ORDER BY priority DESC, run_at_ms, id
    LIMIT %(limit)s
)
RETURNING *
