-- Fleet-limited claim of a keyed name limited by global_concurrency alone, as a function (docs/limits.md): the
-- name's lock, then the count and the claim. Created by the app's migration 0009. A keyed name has no batch, so
-- with no rate and no global resource a call is one task, and each key's live calls are the name's tasks of
-- that key running under an unexpired lease, counted from the tasks table: nothing is written to the start log.
-- VOLATILE, so the claim after the lock reads with a fresh snapshot and counts what the lock holder before it committed.
-- params: the claim's own (p_*), p_synchronous_commit ('off' = ASYNC_CLAIM_COMMIT, null = the session's)
CREATE OR REPLACE FUNCTION cairnq_django_claim_concurrent_keyed(
    p_concurrency int,
    p_head int,
    p_lease_ms bigint,
    p_limit int,
    p_name text,
    p_name_scope text,
    p_queues text[],
    p_scan int,
    p_worker_id text,
    p_synchronous_commit text
) RETURNS TABLE (
    id text, name text, queue text, status text, payload jsonb, payload_bytes integer, result jsonb, error jsonb,
    metadata jsonb, progress double precision, message text, attempt integer, max_attempts integer, priority integer,
    worker_id text, lease_until_ms bigint, run_at_ms bigint, cancel_requested_at_ms bigint, parent_id text, root_id text,
    correlation_id text, created_at_ms bigint, updated_at_ms bigint, completed_at_ms bigint
) LANGUAGE plpgsql VOLATILE
-- Index scans only, as the other limited claims: the plan is kept for the session.
SET enable_seqscan = off
-- Plain index scans, never bitmap ones: a settled task leaves a dead entry in cairnq_tasks_lease_idx until vacuum,
-- and only a plain index scan marks such entries dead for the scans after it (docs/performance.md, "Fleet limits").
SET enable_bitmapscan = off
-- Planned once per session, not on every call: planning the statement below cost about as much as running it
-- (docs/performance.md, "Fleet limits"). The two settings above keep that one plan on the indexes.
SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
BEGIN
    -- Claims of the same name queue here (the lock the start-log claims of the name take too).
    PERFORM pg_advisory_xact_lock(1667330417, hashtext(p_name_scope));
    PERFORM set_config('synchronous_commit', COALESCE(p_synchronous_commit, current_setting('synchronous_commit')), true);
    RETURN QUERY
    WITH clock AS (
        SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms
    ),
    -- How many more calls each key with live calls may start now: its tasks running under an unexpired lease,
    -- from cairnq_tasks_lease_idx (as many as the fleet runs). A dead worker's tasks count until their leases
    -- run out. A key counted nowhere has the whole limit.
    room AS (
        SELECT k.limit_key, p_concurrency - count(*) AS room
        FROM cairnq_tasks t
        CROSS JOIN LATERAL (SELECT coalesce(t.metadata -> 'cairnq_django' ->> 'limit_key', '') AS limit_key) k
        WHERE t.status = 'running' AND t.lease_until_ms IS NOT NULL AND t.lease_until_ms > (TABLE clock)
          AND t.name = p_name
        GROUP BY k.limit_key
    ),
    budget AS (
        SELECT greatest(0, p_limit) AS rows
    ),
    -- Each queue's first p_head rows in cairnq_tasks_claim_name_idx order, saturated keys skipped so they hide no
    -- other key (p_head holds several rows per row wanted: enough keys, as a rule, without reading p_scan rows).
    ahead AS (
        SELECT head.id, head.priority, head.run_at_ms, head.limit_key
        FROM unnest(p_queues) wanted(queue)
        CROSS JOIN LATERAL (
            SELECT t.id, t.priority, t.run_at_ms, k.limit_key
            FROM cairnq_tasks t
            CROSS JOIN LATERAL (SELECT coalesce(t.metadata -> 'cairnq_django' ->> 'limit_key', '') AS limit_key) k
            WHERE t.queue = wanted.queue
              AND t.status = 'queued'
              -- The BETWEEN repeats the equality so the session's one plan reads cairnq_tasks_claim_name_idx
              -- even when the statistics see one distinct name (claim_one_queue_one_name.sql says why).
              AND t.name = p_name AND t.name BETWEEN p_name AND p_name
              AND t.run_at_ms <= (TABLE clock)
              AND wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
              AND k.limit_key NOT IN (SELECT limit_key FROM room WHERE room <= 0)
            ORDER BY t.priority DESC, t.run_at_ms, t.id
            LIMIT p_head
        ) head
        ORDER BY head.priority DESC, head.run_at_ms, head.id
        LIMIT p_head
    ),
    -- When the first read found too few keys (one key's long run), read on past its keys.
    behind AS (
        SELECT head.id, head.priority, head.run_at_ms, head.limit_key
        FROM unnest(p_queues) wanted(queue)
        CROSS JOIN LATERAL (
            SELECT t.id, t.priority, t.run_at_ms, k.limit_key
            FROM cairnq_tasks t
            CROSS JOIN LATERAL (SELECT coalesce(t.metadata -> 'cairnq_django' ->> 'limit_key', '') AS limit_key) k
            WHERE (SELECT count(DISTINCT limit_key) FROM ahead) < p_limit
              AND t.queue = wanted.queue
              AND t.status = 'queued'
              AND t.name = p_name AND t.name BETWEEN p_name AND p_name
              AND t.run_at_ms <= (TABLE clock)
              AND wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
              AND k.limit_key NOT IN (SELECT limit_key FROM room WHERE room <= 0 UNION SELECT limit_key FROM ahead)
            ORDER BY t.priority DESC, t.run_at_ms, t.id
            LIMIT p_scan
        ) head
        ORDER BY head.priority DESC, head.run_at_ms, head.id
        LIMIT p_scan
    ),
    candidate AS (TABLE ahead UNION ALL TABLE behind),
    admitted AS (
        SELECT c.id
        FROM (
            SELECT candidate.*,
                   row_number() OVER (PARTITION BY limit_key ORDER BY priority DESC, run_at_ms, id) AS nth
            FROM candidate
        ) c
        LEFT JOIN room m ON m.limit_key = c.limit_key
        WHERE c.nth <= coalesce(m.room, p_concurrency)
        ORDER BY c.priority DESC, c.run_at_ms, c.id
        LIMIT (SELECT rows FROM budget)
    ),
    -- A row locked elsewhere is skipped, never waited for: the draw only takes less than it was allowed.
    picked AS MATERIALIZED (
        SELECT ctid FROM cairnq_tasks
        WHERE id IN (SELECT id FROM admitted) AND status = 'queued'
        FOR UPDATE SKIP LOCKED
    ),
    claimed AS (
        UPDATE cairnq_tasks
        SET status = 'running', worker_id = p_worker_id, lease_until_ms = (TABLE clock) + p_lease_ms,
            attempt = attempt + 1, updated_at_ms = (TABLE clock)
        WHERE ctid = ANY(ARRAY(SELECT ctid FROM picked))
        RETURNING id, name, queue, status,
            CASE WHEN pg_column_size(payload) <= CASE WHEN pg_column_compression(payload) IS NULL THEN 262144 ELSE 8192 END
                 THEN payload END AS payload,
            CASE WHEN pg_column_size(payload) > CASE WHEN pg_column_compression(payload) IS NULL THEN 262144 ELSE 8192 END
                 THEN octet_length(payload::text) END AS payload_bytes,
            result, error, metadata, progress, message, attempt, max_attempts, priority, worker_id, lease_until_ms,
            run_at_ms, cancel_requested_at_ms, parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
    )
    SELECT * FROM claimed ORDER BY priority DESC, run_at_ms, id;
END
$claim$
