-- Fleet-limited claim of one name (docs/limits.md), sent after lock_scopes.sql: count the fleet's live calls
-- and recent starts, lease what the limits admit in claim order, and log each call's start.
-- params: scopes, name_scope, resource_scope, queues, name, worker_id, lease_ms, limit, batch, keyed, concurrency, rate_count, rate_ms, burst_count, burst_ms, fresh_room, resource_capacity, scan, synchronous_commit

WITH commit_mode AS MATERIALIZED (
    SELECT set_config(
        'synchronous_commit',
        COALESCE(%(synchronous_commit)s::text, current_setting('synchronous_commit')),
        true
    ) AS applied
),
clock AS MATERIALIZED (
    SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms
),
-- A call is live while its first task still runs under the logged attempt and worker, lease unexpired.
live AS MATERIALIZED (
    SELECT s.scope, s.limit_key, count(*) AS calls
    FROM cairnq_tasks AS t
    JOIN cairnq_django_fleet_start AS s
      ON s.task_id = t.id AND s.attempt = t.attempt AND s.worker_id = t.worker_id
    WHERE t.status = 'running'
      AND t.lease_until_ms IS NOT NULL
      AND t.lease_until_ms > (SELECT now_ms FROM clock)
      AND s.scope = ANY(%(scopes)s::text[])
    GROUP BY s.scope, s.limit_key
),
recent AS MATERIALIZED (
    SELECT limit_key,
           count(*) AS in_window,
           count(*) FILTER (WHERE started_at_ms > (SELECT now_ms FROM clock) - %(burst_ms)s::bigint) AS in_burst
    FROM cairnq_django_fleet_start
    WHERE %(rate_count)s::int IS NOT NULL
      AND scope = %(name_scope)s::text
      AND started_at_ms > (SELECT now_ms FROM clock) - %(rate_ms)s::bigint
    GROUP BY limit_key
),
-- How many more calls each counted key may start now; a key counted nowhere has fresh_room.
room AS MATERIALIZED (
    SELECT k.limit_key,
           least(%(concurrency)s::int - coalesce(l.calls, 0),
                 %(rate_count)s::int - coalesce(r.in_window, 0),
                 %(burst_count)s::int - coalesce(r.in_burst, 0)) AS room
    FROM (SELECT limit_key FROM live WHERE scope = %(name_scope)s::text UNION SELECT limit_key FROM recent) AS k
    LEFT JOIN live AS l ON l.scope = %(name_scope)s::text AND l.limit_key = k.limit_key
    LEFT JOIN recent AS r ON r.limit_key = k.limit_key
),
-- Rows this draw may lease in all: the worker's limit, the global resource's room, an unkeyed name's room.
budget AS MATERIALIZED (
    SELECT greatest(0, least(
        %(limit)s::int,
        %(batch)s::int * (%(resource_capacity)s::int
                          - coalesce((SELECT sum(calls) FROM live WHERE scope = %(resource_scope)s::text), 0)),
        CASE WHEN NOT %(keyed)s::bool
             THEN %(batch)s::int * coalesce((SELECT room FROM room WHERE limit_key = ''), %(fresh_room)s::int) END
    ))::int AS rows
),
-- Each queue's head in cairnq_tasks_claim_name_idx order, saturated keys skipped so they hide no other key.
candidate AS MATERIALIZED (
    SELECT head.id, head.priority, head.run_at_ms, head.limit_key
    FROM unnest(%(queues)s::text[]) AS wanted(queue)
    CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.run_at_ms,
               CASE WHEN %(keyed)s::bool
                    THEN coalesce(t.metadata -> 'cairnq_django' ->> 'limit_key', '') ELSE '' END AS limit_key
        FROM cairnq_tasks AS t
        WHERE t.queue = wanted.queue
          AND t.status = 'queued'
          AND t.name = %(name)s
          AND t.run_at_ms <= (SELECT now_ms FROM clock)
          AND NOT EXISTS (SELECT 1 FROM cairnq_django_queue_pause AS p WHERE p.queue = wanted.queue)
          AND (NOT %(keyed)s::bool
               OR coalesce(t.metadata -> 'cairnq_django' ->> 'limit_key', '')
                  NOT IN (SELECT limit_key FROM room WHERE room <= 0))
        ORDER BY t.priority DESC, t.run_at_ms, t.id
        LIMIT %(scan)s
    ) AS head
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT %(scan)s
),
admitted AS MATERIALIZED (
    SELECT c.id
    FROM (
        SELECT candidate.*,
               row_number() OVER (PARTITION BY limit_key ORDER BY priority DESC, run_at_ms, id) AS nth
        FROM candidate
    ) AS c
    LEFT JOIN room AS m ON m.limit_key = c.limit_key
    WHERE NOT %(keyed)s::bool OR c.nth <= coalesce(m.room, %(fresh_room)s::int)
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
),
-- A call is batch rows in claim order (the worker cuts them the same way); its first row stands for it.
heads AS (
    SELECT c.id, c.attempt, a.limit_key,
           row_number() OVER (ORDER BY c.priority DESC, c.run_at_ms, c.id) AS nth
    FROM claimed AS c JOIN candidate AS a ON a.id = c.id
),
started AS (
    INSERT INTO cairnq_django_fleet_start (scope, limit_key, task_id, attempt, worker_id, started_at_ms)
    SELECT scope, CASE WHEN scope = %(name_scope)s::text THEN h.limit_key ELSE '' END,
           h.id, h.attempt, %(worker_id)s, (SELECT now_ms FROM clock)
    FROM heads AS h CROSS JOIN unnest(%(scopes)s::text[]) AS scope
    WHERE (h.nth - 1) %% %(batch)s::int = 0
)
SELECT * FROM claimed ORDER BY priority DESC, run_at_ms, id
