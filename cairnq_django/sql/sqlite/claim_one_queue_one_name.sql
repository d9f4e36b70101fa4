-- Draw up to limit claimable tasks in claim order and lease them to worker_id
-- (protocol 3.9 step 2b): status running, lease now + lease_ms, attempt + 1.
-- params: queue, name, worker_id, lease_ms, limit, now (process ms)
-- One queue and one name: cairnq_tasks_claim_name_idx read in claim order, no sort.
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
      AND name = %(name)s
      AND run_at_ms <= %(now)s
    ORDER BY priority DESC, run_at_ms, id
    LIMIT %(limit)s
)
RETURNING *
