-- Fleet-limited claim of a keyed name (docs/limits.md)
-- After lock_scopes.sql: count the fleet's live calls and recent starts, lease what the limits admit in claim order, log each call's start.
-- params: scopes, name_scope, resource_scope, queues, name, worker_id, lease_ms, limit, concurrency, rate_count, rate_ms, burst_count, burst_ms, fresh_room, resource_capacity, scan

WITH clock AS (
    SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms
),
-- A call is live while its first task still runs under the logged attempt and worker, lease unexpired.
live AS (
    SELECT s.scope, s.limit_key, count(*) AS calls
    FROM cairnq_tasks t
    JOIN cairnq_django_fleet_start s
      ON s.task_id = t.id AND s.attempt = t.attempt AND s.worker_id = t.worker_id
    WHERE t.status = 'running'
      AND t.lease_until_ms > (TABLE clock)
      AND s.scope = ANY(%(scopes)s::text[])
    GROUP BY s.scope, s.limit_key
),
-- How many more calls each counted key may start now: its live calls and its starts in the rate windows
-- (a key counted nowhere has fresh_room).
room AS (
    SELECT limit_key,
           least(%(concurrency)s - sum(calls), %(rate_count)s - sum(recent), %(burst_count)s - sum(burst)) AS room
    FROM (
        SELECT limit_key, calls, 0 AS recent, 0 AS burst FROM live WHERE scope = %(name_scope)s
        UNION ALL
        SELECT limit_key, 0, 1, (started_at_ms > (TABLE clock) - %(burst_ms)s)::int
        FROM cairnq_django_fleet_start
        WHERE %(rate_count)s IS NOT NULL AND scope = %(name_scope)s AND started_at_ms > (TABLE clock) - %(rate_ms)s
    ) counted
    GROUP BY limit_key
),
-- Rows this draw may lease in all: the worker's limit and the global resource's room (a call is one row).
budget AS (
    SELECT greatest(0, least(%(limit)s,
        %(resource_capacity)s - coalesce((SELECT sum(calls) FROM live WHERE scope = %(resource_scope)s), 0))) AS rows
),
-- Each queue's head in cairnq_tasks_claim_name_idx order, saturated keys skipped so they hide no other key.
ahead AS (
    SELECT head.id, head.priority, head.run_at_ms, head.limit_key
    FROM unnest(%(queues)s::text[]) wanted(queue)
    CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.run_at_ms, k.limit_key
        FROM cairnq_tasks t
        CROSS JOIN LATERAL (SELECT coalesce(t.metadata -> 'cairnq_django' ->> 'limit_key', '') AS limit_key) k
        WHERE t.queue = wanted.queue
          AND t.status = 'queued'
          AND t.name = %(name)s
          AND t.run_at_ms <= (TABLE clock)
          AND wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
          AND k.limit_key NOT IN (SELECT limit_key FROM room WHERE room <= 0)
        ORDER BY t.priority DESC, t.run_at_ms, t.id
        LIMIT %(scan)s
    ) head
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT %(scan)s
),
-- When the first read found too few keys (one key's long run), read on past its keys.
behind AS (
    SELECT head.id, head.priority, head.run_at_ms, head.limit_key
    FROM unnest(%(queues)s::text[]) wanted(queue)
    CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.run_at_ms, k.limit_key
        FROM cairnq_tasks t
        CROSS JOIN LATERAL (SELECT coalesce(t.metadata -> 'cairnq_django' ->> 'limit_key', '') AS limit_key) k
        WHERE (SELECT count(DISTINCT limit_key) FROM ahead) < %(limit)s
          AND t.queue = wanted.queue
          AND t.status = 'queued'
          AND t.name = %(name)s
          AND t.run_at_ms <= (TABLE clock)
          AND wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
          AND k.limit_key NOT IN (SELECT limit_key FROM room WHERE room <= 0 UNION SELECT limit_key FROM ahead)
        ORDER BY t.priority DESC, t.run_at_ms, t.id
        LIMIT %(scan)s
    ) head
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT %(scan)s
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
    WHERE c.nth <= coalesce(m.room, %(fresh_room)s)
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
    SET status = 'running', worker_id = %(worker_id)s, lease_until_ms = (TABLE clock) + %(lease_ms)s,
        attempt = attempt + 1, updated_at_ms = (TABLE clock)
    WHERE ctid = ANY(ARRAY(SELECT ctid FROM picked))
    RETURNING id, name, queue, status,
        CASE WHEN pg_column_size(payload) <= CASE WHEN pg_column_compression(payload) IS NULL THEN 262144 ELSE 8192 END
             THEN payload END AS payload,
        CASE WHEN pg_column_size(payload) > CASE WHEN pg_column_compression(payload) IS NULL THEN 262144 ELSE 8192 END
             THEN octet_length(payload::text) END AS payload_bytes,
        result, error, metadata, progress, message, attempt, max_attempts, priority, worker_id, lease_until_ms,
        run_at_ms, cancel_requested_at_ms, parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
),
-- Each row is a call (a keyed name has no batch).
started AS (
    INSERT INTO cairnq_django_fleet_start (scope, limit_key, task_id, attempt, worker_id, started_at_ms)
    SELECT scope, CASE WHEN scope = %(name_scope)s THEN a.limit_key ELSE '' END, c.id, c.attempt, %(worker_id)s, (TABLE clock)
    FROM claimed c JOIN candidate a ON a.id = c.id
    CROSS JOIN unnest(%(scopes)s::text[]) AS scope
)
SELECT * FROM claimed ORDER BY priority DESC, run_at_ms, id
