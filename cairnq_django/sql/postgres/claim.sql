-- Draw up to limit claimable tasks in claim order and lease them to worker_id
-- (protocol 3.9 step 2b): status running, lease now + lease_ms, attempt + 1.
-- params: queues (text[]), names (text[] or null = any name), worker_id, lease_ms, limit
-- General shape: several queues and a name list (or none); needs a sort of the candidates.
-- The locked subquery sits in FROM (not WHERE id IN): FOR UPDATE SKIP LOCKED
-- there locks exactly the rows LIMIT picked, and concurrent claimers skip them
-- instead of queueing behind them. clock_timestamp() because the transaction
-- may have waited on locks during lease recovery.
UPDATE cairnq_tasks AS t
SET status = 'running',
    worker_id = %(worker_id)s,
    lease_until_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint + %(lease_ms)s::bigint,
    attempt = t.attempt + 1,
    updated_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
FROM (
    SELECT id FROM cairnq_tasks
    WHERE queue = ANY(%(queues)s::text[])
      AND status = 'queued'
      AND (%(names)s::text[] IS NULL OR name = ANY(%(names)s::text[]))
      AND run_at_ms <= (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint)
    ORDER BY priority DESC, run_at_ms, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS picked
WHERE t.id = picked.id
  AND t.status = 'queued'
RETURNING t.*
