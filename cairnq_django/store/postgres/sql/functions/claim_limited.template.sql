-- [limited unkeyed]
-- Fleet-limited claim, as a function (docs/limits.md): the scopes' locks, then the count and the claim.
-- [/limited unkeyed]
-- [limited keyed]
-- Fleet-limited claim of a keyed name, as a function (docs/limits.md): the scopes' locks, then the count and the claim.
-- [/limited keyed]
-- [limited]
-- Created by the app's migrations. PL/pgSQL keeps the claim's plan for the session, where the statement sent
-- on its own was planned on every call; and the function is VOLATILE, so the claim after the locks reads
-- with a fresh snapshot and counts what the lock holder before it committed.
-- [/limited]
-- [concurrent unkeyed]
-- Fleet-limited claim of a name limited by global_concurrency alone, as a function (docs/limits.md): the name's
-- lock, then the count and the claim. Created by the app's migration 0009. With no rate, no global resource and
-- no batch, a call is one task, so the live calls are the name's tasks running under an unexpired lease, counted
-- from the tasks table: nothing is written to the start log. VOLATILE, so the claim after the lock reads with a
-- fresh snapshot and counts what the lock holder before it committed.
-- [/concurrent unkeyed]
-- [concurrent keyed]
-- Fleet-limited claim of a keyed name limited by global_concurrency alone, as a function (docs/limits.md): the
-- name's lock, then the count and the claim. Created by the app's migration 0009. A keyed name has no batch, so
-- with no rate and no global resource a call is one task, and each key's live calls are the name's tasks of
-- that key running under an unexpired lease, counted from the tasks table: nothing is written to the start log.
-- VOLATILE, so the claim after the lock reads with a fresh snapshot and counts what the lock holder before it committed.
-- [/concurrent keyed]
-- params: the claim's own (p_*), p_synchronous_commit ('off' = ASYNC_CLAIM_COMMIT, null = the session's)
CREATE OR REPLACE FUNCTION cairnq_django_{name}(
-- [limited unkeyed]
    p_batch int,
-- [/limited unkeyed]
-- [limited]
    p_burst_count int,
    p_burst_ms bigint,
-- [/limited]
    p_concurrency int,
-- [limited]
    p_fresh_room int,
-- [/limited]
-- [concurrent keyed]
    p_head int,
-- [/concurrent keyed]
    p_lease_ms bigint,
    p_limit int,
    p_name text,
    p_name_scope text,
    p_queues text[],
-- [limited]
    p_rate_count int,
    p_rate_ms bigint,
    p_resource_capacity int,
    p_resource_scope text,
-- [/limited]
-- [admits]
    p_scan int,
-- [/admits]
-- [limited]
    p_scopes text[],
-- [/limited]
    p_worker_id text,
    p_synchronous_commit text
) RETURNS TABLE (
    id text, name text, queue text, status text, payload jsonb, payload_bytes integer, result jsonb, error jsonb,
    metadata jsonb, progress double precision, message text, attempt integer, max_attempts integer, priority integer,
    worker_id text, lease_until_ms bigint, run_at_ms bigint, cancel_requested_at_ms bigint, parent_id text, root_id text,
    correlation_id text, created_at_ms bigint, updated_at_ms bigint, completed_at_ms bigint
) LANGUAGE plpgsql VOLATILE
-- [limited]
-- Index scans only: the plan is kept for the session, and one made while the start log looked empty
-- would read the whole log once per running task as it grows.
-- [/limited]
-- [concurrent]
-- Index scans only, as the other limited claims: the plan is kept for the session.
-- [/concurrent]
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
-- [limited]
    -- Claims of the same scopes queue here, in one order.
    PERFORM pg_advisory_xact_lock(1667330417, hashtext(scope)) FROM unnest(p_scopes) AS scope ORDER BY scope;
-- [/limited]
-- [concurrent]
    -- Claims of the same name queue here (the lock the start-log claims of the name take too).
    PERFORM pg_advisory_xact_lock(1667330417, hashtext(p_name_scope));
-- [/concurrent]
    PERFORM set_config('synchronous_commit', COALESCE(p_synchronous_commit, current_setting('synchronous_commit')), true);
    RETURN QUERY
    WITH clock AS (
        SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms
    ),
-- [limited]
    -- Every task running under an unexpired lease, from cairnq_tasks_lease_idx: as many as the fleet runs,
    -- where the start log also holds every start since its last prune.
    running AS MATERIALIZED (
        SELECT t.id, t.attempt, t.worker_id
        FROM cairnq_tasks t
        WHERE t.status = 'running' AND t.lease_until_ms IS NOT NULL AND t.lease_until_ms > (TABLE clock)
    ),
    -- A call is live while its first task still runs under the logged attempt and worker.
    -- OFFSET 0 keeps the lookup per running task (by cairnq_django_start_task_idx): never a scan of the log.
    live AS (
        SELECT s.scope, s.limit_key, count(*) AS calls
        FROM running r
        CROSS JOIN LATERAL (
            SELECT s.scope, s.limit_key
            FROM cairnq_django_fleet_start s
            WHERE s.task_id = r.id AND s.attempt = r.attempt AND s.worker_id = r.worker_id
              AND s.scope = ANY(p_scopes)
            OFFSET 0
        ) s
        GROUP BY s.scope, s.limit_key
    ),
-- [unkeyed]
    -- How many more calls may start now: live calls and starts in the rate windows (none counted: fresh_room).
    room AS (
        SELECT least(p_concurrency - sum(calls), p_rate_count - sum(recent), p_burst_count - sum(burst)) AS room
-- [/unkeyed]
-- [keyed]
    -- How many more calls each counted key may start now: its live calls and its starts in the rate windows
    -- (a key counted nowhere has fresh_room).
    room AS (
        SELECT limit_key,
               least(p_concurrency - sum(calls), p_rate_count - sum(recent), p_burst_count - sum(burst)) AS room
-- [/keyed]
        FROM (
            SELECT limit_key, calls, 0 AS recent, 0 AS burst FROM live WHERE scope = p_name_scope
            UNION ALL
            SELECT limit_key, 0, 1, (started_at_ms > (TABLE clock) - p_burst_ms)::int
            FROM cairnq_django_fleet_start
            WHERE p_rate_count IS NOT NULL AND scope = p_name_scope AND started_at_ms > (TABLE clock) - p_rate_ms
        ) counted
-- [keyed]
        GROUP BY limit_key
-- [/keyed]
    ),
-- [unkeyed]
    -- Rows this draw may lease in all: the worker's limit, the global resource's room, the name's room.
    budget AS (
        SELECT greatest(0, least(
            p_limit,
            p_batch * (p_resource_capacity
                              - coalesce((SELECT sum(calls) FROM live WHERE scope = p_resource_scope), 0)),
            p_batch * coalesce((SELECT room FROM room), p_fresh_room)
        )) AS rows
    ),
-- [/unkeyed]
-- [keyed]
    -- Rows this draw may lease in all: the worker's limit and the global resource's room (a call is one row).
    budget AS (
        SELECT greatest(0, least(p_limit,
            p_resource_capacity - coalesce((SELECT sum(calls) FROM live WHERE scope = p_resource_scope), 0))) AS rows
    ),
-- [/keyed]
-- [/limited]
-- [concurrent unkeyed]
    -- The name's live calls: its tasks running under an unexpired lease, from cairnq_tasks_lease_idx (as many
    -- as the fleet runs). A dead worker's tasks count until their leases run out.
    live AS (
        SELECT count(*) AS calls
        FROM cairnq_tasks t
        WHERE t.status = 'running' AND t.lease_until_ms IS NOT NULL AND t.lease_until_ms > (TABLE clock)
          AND t.name = p_name
    ),
    budget AS (
        SELECT greatest(0, least(p_limit, p_concurrency - (SELECT calls FROM live))) AS rows
    ),
    -- Each queue's head in cairnq_tasks_claim_name_idx order, locked as it is read, as the plain claim does: a row
    -- locked elsewhere is skipped, never waited for, and the next one taken in its place.
    picked AS MATERIALIZED (
        SELECT head.ctid
        FROM unnest(p_queues) wanted(queue)
        CROSS JOIN LATERAL (
            SELECT t.ctid, t.id, t.priority, t.run_at_ms
            FROM cairnq_tasks t
            WHERE t.queue = wanted.queue
              AND t.status = 'queued'
              -- The BETWEEN repeats the equality so the session's one plan reads cairnq_tasks_claim_name_idx
              -- even when the statistics see one distinct name (claim_one_queue_one_name.sql says why).
              AND t.name = p_name AND t.name BETWEEN p_name AND p_name
              AND t.run_at_ms <= (TABLE clock)
              AND wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
            ORDER BY t.priority DESC, t.run_at_ms, t.id
            LIMIT (SELECT rows FROM budget)
            FOR UPDATE SKIP LOCKED
        ) head
        ORDER BY head.priority DESC, head.run_at_ms, head.id
        LIMIT (SELECT rows FROM budget)
    ),
-- [/concurrent unkeyed]
-- [concurrent keyed]
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
-- [/concurrent keyed]
-- [limited unkeyed]
    -- Each queue's head in cairnq_tasks_claim_name_idx order.
    candidate AS (
        SELECT head.id, head.priority, head.run_at_ms
        FROM unnest(p_queues) wanted(queue)
        CROSS JOIN LATERAL (
            SELECT t.id, t.priority, t.run_at_ms
            FROM cairnq_tasks t
            WHERE t.queue = wanted.queue
              AND t.status = 'queued'
              -- The BETWEEN repeats the equality so the session's one plan reads cairnq_tasks_claim_name_idx
              -- even when the statistics see one distinct name (claim_one_queue_one_name.sql says why).
              AND t.name = p_name AND t.name BETWEEN p_name AND p_name
              AND t.run_at_ms <= (TABLE clock)
              AND wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
            ORDER BY t.priority DESC, t.run_at_ms, t.id
            LIMIT p_scan
        ) head
        ORDER BY head.priority DESC, head.run_at_ms, head.id
        LIMIT p_scan
    ),
    admitted AS (
        SELECT id FROM candidate ORDER BY priority DESC, run_at_ms, id LIMIT (SELECT rows FROM budget)
    ),
-- [/limited unkeyed]
-- [limited keyed]
    -- Each queue's head in cairnq_tasks_claim_name_idx order, saturated keys skipped so they hide no other key.
-- [/limited keyed]
-- [concurrent keyed]
    -- Each queue's first p_head rows in cairnq_tasks_claim_name_idx order, saturated keys skipped so they hide no
    -- other key (p_head holds several rows per row wanted: enough keys, as a rule, without reading p_scan rows).
-- [/concurrent keyed]
-- [keyed]
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
            LIMIT {ahead_rows}
        ) head
        ORDER BY head.priority DESC, head.run_at_ms, head.id
        LIMIT {ahead_rows}
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
        WHERE c.nth <= coalesce(m.room, {fresh_room})
        ORDER BY c.priority DESC, c.run_at_ms, c.id
        LIMIT (SELECT rows FROM budget)
    ),
-- [/keyed]
-- [admits]
    -- A row locked elsewhere is skipped, never waited for: the draw only takes less than it was allowed.
    picked AS MATERIALIZED (
        SELECT ctid FROM cairnq_tasks
        WHERE id IN (SELECT id FROM admitted) AND status = 'queued'
        FOR UPDATE SKIP LOCKED
    ),
-- [/admits]
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
-- [concurrent]
    )
-- [/concurrent]
-- [limited]
    ),
-- [/limited]
-- [limited unkeyed]
    -- A call is batch rows in claim order (the worker cuts them the same way); its first row stands for it.
    started AS (
        INSERT INTO cairnq_django_fleet_start (scope, limit_key, task_id, attempt, worker_id, started_at_ms)
        SELECT scope, '', h.id, h.attempt, p_worker_id, (TABLE clock)
        FROM (SELECT id, attempt, row_number() OVER (ORDER BY priority DESC, run_at_ms, id) AS nth FROM claimed) h
        CROSS JOIN unnest(p_scopes) AS scope
        WHERE (h.nth - 1) % p_batch = 0
    )
-- [/limited unkeyed]
-- [limited keyed]
    -- Each row is a call (a keyed name has no batch).
    started AS (
        INSERT INTO cairnq_django_fleet_start (scope, limit_key, task_id, attempt, worker_id, started_at_ms)
        SELECT scope, CASE WHEN scope = p_name_scope THEN a.limit_key ELSE '' END, c.id, c.attempt, p_worker_id, (TABLE clock)
        FROM claimed c JOIN candidate a ON a.id = c.id
        CROSS JOIN unnest(p_scopes) AS scope
    )
-- [/limited keyed]
    SELECT * FROM claimed ORDER BY priority DESC, run_at_ms, id;
END
$claim$
