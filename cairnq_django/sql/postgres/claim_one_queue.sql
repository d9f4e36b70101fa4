-- Draw up to limit claimable tasks in claim order and lease them to worker_id
-- (protocol 3.9 step 2b): status running, lease now + lease_ms, attempt + 1.
-- params: queue, names (text[] or null = any name), worker_id, lease_ms, limit, synchronous_commit (text or null)
-- One queue: the equality lets cairnq_tasks_claim_idx be read in claim order.
-- The locked selection is a MATERIALIZED CTE (not WHERE id IN, not a plain FROM
-- subquery): FOR UPDATE SKIP LOCKED locks exactly the rows LIMIT picked and
-- concurrent claimers skip them; materializing it runs it exactly once, since a
-- re-scanned subquery (nested loop) would skip the rows this very statement just
-- updated and lease more than limit rows. clock_timestamp() because the transaction
-- may have waited on locks during lease recovery.
-- synchronous_commit: 'off' lets this claim's commit return before its WAL
-- record is flushed (CAIRNQ["ASYNC_CLAIM_COMMIT"], worker only), null keeps the
-- session's setting. set_config(..., true) is SET LOCAL: it lasts until the
-- transaction ends, including the implicit one of an autocommit statement, and
-- the commit_mode CTE is joined below so it is evaluated (once) whenever a row
-- is written. See docs/performance-notes.md for what a lost claim costs.
-- The picked ids reach the UPDATE as one array (an InitPlan, run once) so
-- the rows are fetched by primary key; joining the CTE instead let the
-- planner hash-join it against a scan of the whole table (~20%% slower
-- for 256 rows).
WITH commit_mode AS MATERIALIZED (
    SELECT set_config(
        'synchronous_commit',
        COALESCE(%(synchronous_commit)s::text, current_setting('synchronous_commit')),
        true
    ) AS applied
),
picked AS MATERIALIZED (
    SELECT id FROM cairnq_tasks
    WHERE queue = %(queue)s
      AND status = 'queued'
      AND (%(names)s::text[] IS NULL OR name = ANY(%(names)s::text[]))
      AND run_at_ms <= (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint)
    ORDER BY priority DESC, run_at_ms, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE cairnq_tasks AS t
SET status = 'running',
    worker_id = %(worker_id)s,
    lease_until_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint + %(lease_ms)s::bigint,
    attempt = t.attempt + 1,
    updated_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
FROM commit_mode
WHERE t.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING t.*
