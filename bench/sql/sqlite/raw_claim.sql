-- Claim up to :limit due tasks of one queue for one worker (run under BEGIN IMMEDIATE).
-- Parameters: :queue, :worker, :lease_ms, :limit, :now (ms).
UPDATE cairnq_tasks
SET status = 'running',
    worker_id = :worker,
    attempt = attempt + 1,
    lease_until_ms = :now + :lease_ms,
    updated_at_ms = :now
WHERE id IN (
    SELECT id FROM cairnq_tasks
    WHERE queue = :queue AND status = 'queued' AND run_at_ms <= :now
    ORDER BY priority DESC, run_at_ms, id
    LIMIT :limit
)
RETURNING id, payload
