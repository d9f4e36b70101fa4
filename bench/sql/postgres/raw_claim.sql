-- Claim up to `limit` due tasks of one queue for one worker.
-- Parameters: queue, worker, lease_ms, limit.
-- The locked subquery sits in a CTE (not WHERE id IN) so SKIP LOCKED decides
-- which rows the UPDATE touches; the clock is read once as a scalar subquery.
WITH clock AS (
    SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms
), due AS (
    SELECT t.id
    FROM cairnq_tasks t
    WHERE t.queue = %(queue)s
      AND t.status = 'queued'
      AND t.run_at_ms <= (SELECT ms FROM clock)
    ORDER BY t.priority DESC, t.run_at_ms, t.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE cairnq_tasks t
SET status = 'running',
    worker_id = %(worker)s,
    attempt = t.attempt + 1,
    lease_until_ms = (SELECT ms FROM clock) + %(lease_ms)s,
    updated_at_ms = (SELECT ms FROM clock)
FROM due
WHERE t.id = due.id
RETURNING t.id, t.payload
