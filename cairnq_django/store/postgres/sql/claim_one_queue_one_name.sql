-- Draw up to limit claimable tasks in claim order and lease them to worker_id
-- (protocol 3.9 step 2b): status running, lease now + lease_ms, attempt + 1.
-- params: queue, name, worker_id, lease_ms, limit, synchronous_commit (text or null)
-- One queue and one name: cairnq_tasks_claim_name_idx read in claim order, no sort.
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
-- The picked rows reach the UPDATE as one array of their ctids (an InitPlan,
-- run once), so the UPDATE is a TID scan: it goes straight to the row versions
-- picked just locked, whatever the table statistics say. With ids instead,
-- stale statistics (a queue analyzed while empty, then filled) made the
-- planner seq-scan the whole table for every claim, and joining the CTE let it
-- hash-join against such a scan. A locked row cannot move, and a picked row
-- whose locked version is newer than this statement's snapshot (changed by
-- another transaction after the snapshot, still queued) is left unclaimed,
-- not claimed twice.
-- The payload comes back only when small. A larger one stays in the database:
-- payload is null and payload_bytes carries the size of its JSON text instead,
-- for the byte budget (protocol 4.6), and the worker fetches it by id
-- (get_payload.sql) when the handler needs it, one task at a time; a claim of
-- several 50 MB rows would otherwise hold every payload in the worker at once,
-- three times over (driver buffer, text, decoded object). "Small" is judged by
-- pg_column_size, read from the value's header without detoasting it: at most
-- 256 KiB, or 8 KiB once PostgreSQL compressed the value (it does above about
-- 2 kB), since a value that compresses well can hide megabytes under 256 KiB.
-- Measuring a large one renders its text on the server (about 0.5 s for
-- 50 MB), a cost only such rows pay. Columns are listed because t.* carries
-- the payload.
WITH commit_mode AS MATERIALIZED (
    SELECT set_config(
        'synchronous_commit',
        COALESCE(%(synchronous_commit)s::text, current_setting('synchronous_commit')),
        true
    ) AS applied
),
picked AS MATERIALIZED (
    SELECT ctid FROM cairnq_tasks
    WHERE queue = %(queue)s
      AND status = 'queued'
      AND name = %(name)s
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
WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM picked))
RETURNING t.id, t.name, t.queue, t.status,
    CASE WHEN pg_column_size(t.payload)
              <= CASE WHEN pg_column_compression(t.payload) IS NULL THEN 262144 ELSE 8192 END
         THEN t.payload END AS payload,
    CASE WHEN pg_column_size(t.payload)
              > CASE WHEN pg_column_compression(t.payload) IS NULL THEN 262144 ELSE 8192 END
         THEN octet_length(t.payload::text) END AS payload_bytes,
    t.result, t.error, t.metadata, t.progress, t.message, t.attempt,
    t.max_attempts, t.priority, t.worker_id, t.lease_until_ms, t.run_at_ms, t.cancel_requested_at_ms,
    t.parent_id, t.root_id, t.correlation_id, t.created_at_ms, t.updated_at_ms, t.completed_at_ms
