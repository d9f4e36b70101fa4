-- Fleet-limited claim (docs/limits.md)
-- After lock_scopes.sql: count the fleet's live calls and recent starts, lease what the limits admit in claim order, log each call's start.
-- params: scopes, name_scope, resource_scope, queues, name, worker_id, lease_ms, limit, batch, concurrency, rate_count, rate_ms, burst_count, burst_ms, fresh_room, resource_capacity, scan

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
-- How many more calls may start now: live calls and starts in the rate windows (none counted: fresh_room).
room AS (
    SELECT least(%(concurrency)s - sum(calls), %(rate_count)s - sum(recent), %(burst_count)s - sum(burst)) AS room
    FROM (
        SELECT limit_key, calls, 0 AS recent, 0 AS burst FROM live WHERE scope = %(name_scope)s
        UNION ALL
        SELECT limit_key, 0, 1, (started_at_ms > (TABLE clock) - %(burst_ms)s)::int
        FROM cairnq_django_fleet_start
        WHERE %(rate_count)s IS NOT NULL AND scope = %(name_scope)s AND started_at_ms > (TABLE clock) - %(rate_ms)s
    ) counted
),
-- Rows this draw may lease in all: the worker's limit, the global resource's room, the name's room.
budget AS (
    SELECT greatest(0, least(
        %(limit)s,
        %(batch)s * (%(resource_capacity)s
                          - coalesce((SELECT sum(calls) FROM live WHERE scope = %(resource_scope)s), 0)),
        %(batch)s * coalesce((SELECT room FROM room), %(fresh_room)s)
    )) AS rows
),
-- Each queue's head in cairnq_tasks_claim_name_idx order.
candidate AS (
    SELECT head.id, head.priority, head.run_at_ms
    FROM unnest(%(queues)s::text[]) wanted(queue)
    CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.run_at_ms
        FROM cairnq_tasks t
        WHERE t.queue = wanted.queue
          AND t.status = 'queued'
          AND t.name = %(name)s
          AND t.run_at_ms <= (TABLE clock)
          AND wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
        ORDER BY t.priority DESC, t.run_at_ms, t.id
        LIMIT %(scan)s
    ) head
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT %(scan)s
),
admitted AS (
    SELECT id FROM candidate ORDER BY priority DESC, run_at_ms, id LIMIT (SELECT rows FROM budget)
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
-- A call is batch rows in claim order (the worker cuts them the same way); its first row stands for it.
started AS (
    INSERT INTO cairnq_django_fleet_start (scope, limit_key, task_id, attempt, worker_id, started_at_ms)
    SELECT scope, '', h.id, h.attempt, %(worker_id)s, (TABLE clock)
    FROM (SELECT id, attempt, row_number() OVER (ORDER BY priority DESC, run_at_ms, id) AS nth FROM claimed) h
    CROSS JOIN unnest(%(scopes)s::text[]) AS scope
    WHERE (h.nth - 1) %% %(batch)s = 0
)
SELECT * FROM claimed ORDER BY priority DESC, run_at_ms, id
