-- [limited unkeyed]
-- Fleet-limited claim of one name, step 1 (pick; docs/limits.md): count the fleet's live calls and recent starts,
-- and pick in claim order what the limits admit. Runs in the claim's IMMEDIATE transaction.
-- [/limited unkeyed]
-- [limited keyed]
-- Fleet-limited claim of a keyed name, step 1 (pick; docs/limits.md): count the fleet's live calls and recent starts,
-- and pick in claim order what the limits admit, with each row's key. Runs in the claim's IMMEDIATE transaction.
-- [/limited keyed]
-- [concurrent unkeyed]
-- Fleet-limited claim of a name limited by global_concurrency alone (pick; docs/limits.md): count the name's tasks
-- running under an unexpired lease (its live calls: no rate, no global resource, no batch), and pick in claim order
-- what the limit admits. The store leases the pick in the same statement (leasing_claim) and logs no start.
-- [/concurrent unkeyed]
-- [concurrent keyed]
-- Fleet-limited claim of a keyed name limited by global_concurrency alone (pick; docs/limits.md): count each key's
-- tasks running under an unexpired lease (its live calls: no rate, no global resource, and a keyed name has no
-- batch), and pick in claim order what the limit admits. The store leases the pick in the same statement
-- (leasing_claim) and logs no start.
-- [/concurrent keyed]
-- Rendered from claim_limited.template.sql (store/sql_templates.py): claim_limited, claim_limited_keyed,
-- claim_concurrent, claim_concurrent_keyed.
-- [limited]
-- params: scopes (JSON), name_scope, resource_scope, queues (JSON), name, limit, batch (unkeyed), concurrency,
-- rate_count, rate_ms, burst_count, burst_ms, fresh_room, resource_capacity, scan, now
WITH live AS (
    SELECT s.scope, s.limit_key, count(*) AS calls
    FROM cairnq_tasks AS t
    JOIN cairnq_django_fleet_start AS s
      ON s.task_id = t.id AND s.attempt = t.attempt AND s.worker_id = t.worker_id
    WHERE t.status = 'running'
      -- The partial index's predicate, literally: SQLite matches it term by term.
      AND t.lease_until_ms IS NOT NULL
      AND t.lease_until_ms > %(now)s
      AND s.scope IN (SELECT value FROM json_each(%(scopes)s))
    GROUP BY s.scope, s.limit_key
),
recent AS (
    SELECT limit_key,
           count(*) AS in_window,
           count(*) FILTER (WHERE started_at_ms > %(now)s - %(burst_ms)s) AS in_burst
    FROM cairnq_django_fleet_start
    WHERE %(rate_count)s IS NOT NULL
      AND scope = %(name_scope)s
      AND started_at_ms > %(now)s - %(rate_ms)s
    GROUP BY limit_key
),
-- How many more calls each counted key may start now; a key counted nowhere has fresh_room.
room AS (
    SELECT k.limit_key,
           min(coalesce(%(concurrency)s - coalesce(l.calls, 0), 2147483647),
               coalesce(%(rate_count)s - coalesce(r.in_window, 0), 2147483647),
               coalesce(%(burst_count)s - coalesce(r.in_burst, 0), 2147483647)) AS room
    FROM (SELECT limit_key FROM live WHERE scope = %(name_scope)s UNION SELECT limit_key FROM recent) AS k
    LEFT JOIN live AS l ON l.scope = %(name_scope)s AND l.limit_key = k.limit_key
    LEFT JOIN recent AS r ON r.limit_key = k.limit_key
),
-- [unkeyed]
-- Rows this draw may pick in all: the worker's limit, the global resource's room, the name's room.
budget AS (
    SELECT max(0, min(
        %(limit)s,
        coalesce(%(batch)s * (%(resource_capacity)s
                 - coalesce((SELECT sum(calls) FROM live WHERE scope = %(resource_scope)s), 0)), 2147483647),
        %(batch)s * coalesce((SELECT room FROM room WHERE limit_key = ''), %(fresh_room)s, 2147483647)
    )) AS rows
),
-- [/unkeyed]
-- [keyed]
-- Rows this draw may pick in all: the worker's limit and the global resource's room (a call is one row).
budget AS (
    SELECT max(0, min(
        %(limit)s,
        coalesce((%(resource_capacity)s
                 - coalesce((SELECT sum(calls) FROM live WHERE scope = %(resource_scope)s), 0)), 2147483647)
    )) AS rows
),
-- [/keyed]
-- [/limited]
-- [concurrent]
-- params: queues (JSON), name, limit, concurrency, head (keyed: rows of the first read), scan (keyed: of the read
-- past its keys), now
-- [/concurrent]
-- [concurrent unkeyed]
WITH live AS (
    SELECT count(*) AS calls
    FROM cairnq_tasks
    WHERE status = 'running'
      -- The partial index's predicate, literally: SQLite matches it term by term.
      AND lease_until_ms IS NOT NULL
      AND lease_until_ms > %(now)s
      AND name = %(name)s
),
-- [/concurrent unkeyed]
-- [concurrent keyed]
-- How many more calls each key with live calls may start now; a key counted nowhere has the whole limit.
WITH room AS (
    SELECT coalesce(json_extract(metadata, '$.cairnq_django.limit_key'), '') AS limit_key,
           %(concurrency)s - count(*) AS room
    FROM cairnq_tasks
    WHERE status = 'running'
      -- The partial index's predicate, literally: SQLite matches it term by term.
      AND lease_until_ms IS NOT NULL
      AND lease_until_ms > %(now)s
      AND name = %(name)s
    GROUP BY 1
),
-- [/concurrent keyed]
-- [unkeyed]
-- Each queue's head in cairnq_tasks_claim_name_idx order.
candidate AS (
    SELECT head.id, head.priority, head.run_at_ms
    FROM (
        SELECT value FROM json_each(%(queues)s)
        WHERE value NOT IN (SELECT queue FROM cairnq_django_queue_pause)
    ) AS wanted
    JOIN cairnq_tasks AS head ON head.id IN (
        SELECT id FROM cairnq_tasks
        WHERE queue = wanted.value
          AND status = 'queued'
          AND name = %(name)s
          AND run_at_ms <= %(now)s
        ORDER BY priority DESC, run_at_ms, id
        LIMIT {candidate_rows}
    )
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT {candidate_rows}
)
-- [/unkeyed]
-- [keyed]
-- Each queue's first scan rows (head, for claim_concurrent_keyed) in cairnq_tasks_claim_name_idx order,
-- saturated keys skipped so they hide no other key.
ahead AS (
    SELECT head.id, head.priority, head.run_at_ms,
           coalesce(json_extract(head.metadata, '$.cairnq_django.limit_key'), '') AS limit_key
    FROM (
        SELECT value FROM json_each(%(queues)s)
        WHERE value NOT IN (SELECT queue FROM cairnq_django_queue_pause)
    ) AS wanted
    JOIN cairnq_tasks AS head ON head.id IN (
        SELECT id FROM cairnq_tasks
        WHERE queue = wanted.value
          AND status = 'queued'
          AND name = %(name)s
          AND run_at_ms <= %(now)s
          AND (coalesce(json_extract(metadata, '$.cairnq_django.limit_key'), '')
                  NOT IN (SELECT limit_key FROM room WHERE room <= 0))
        ORDER BY priority DESC, run_at_ms, id
        LIMIT {ahead_rows}
    )
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT {ahead_rows}
),
-- When the first read found too few keys (one key's long run), read on past its keys.
behind AS (
    SELECT head.id, head.priority, head.run_at_ms,
           coalesce(json_extract(head.metadata, '$.cairnq_django.limit_key'), '') AS limit_key
    FROM (
        SELECT value FROM json_each(%(queues)s)
        WHERE value NOT IN (SELECT queue FROM cairnq_django_queue_pause)
    ) AS wanted
    JOIN cairnq_tasks AS head ON head.id IN (
        SELECT id FROM cairnq_tasks
        WHERE (SELECT count(DISTINCT limit_key) FROM ahead) < %(limit)s
          AND queue = wanted.value
          AND status = 'queued'
          AND name = %(name)s
          AND run_at_ms <= %(now)s
          AND (coalesce(json_extract(metadata, '$.cairnq_django.limit_key'), '')
                  NOT IN (SELECT limit_key FROM room WHERE room <= 0 UNION SELECT limit_key FROM ahead))
        ORDER BY priority DESC, run_at_ms, id
        LIMIT %(scan)s
    )
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT %(scan)s
),
candidate AS (SELECT * FROM ahead UNION ALL SELECT * FROM behind),
ranked AS (
    SELECT candidate.*,
           row_number() OVER (PARTITION BY limit_key ORDER BY priority DESC, run_at_ms, id) AS nth
    FROM candidate
)
-- [/keyed]
-- The pick (store/sqlite/store.py's leasing_claim takes the last line that opens with SELECT for it).
-- [limited unkeyed]
SELECT id, '' AS limit_key
FROM candidate
ORDER BY priority DESC, run_at_ms, id
LIMIT (SELECT rows FROM budget)
-- [/limited unkeyed]
-- [concurrent unkeyed]
SELECT id
FROM candidate
ORDER BY priority DESC, run_at_ms, id
LIMIT max(0, min(%(limit)s, %(concurrency)s - (SELECT calls FROM live)))
-- [/concurrent unkeyed]
-- [limited keyed]
SELECT c.id, c.limit_key
FROM ranked AS c
LEFT JOIN room AS m ON m.limit_key = c.limit_key
WHERE c.nth <= coalesce(m.room, %(fresh_room)s)
ORDER BY c.priority DESC, c.run_at_ms, c.id
LIMIT (SELECT rows FROM budget)
-- [/limited keyed]
-- [concurrent keyed]
SELECT c.id
FROM ranked AS c
LEFT JOIN room AS m ON m.limit_key = c.limit_key
WHERE c.nth <= coalesce(m.room, %(concurrency)s)
ORDER BY c.priority DESC, c.run_at_ms, c.id
LIMIT max(0, %(limit)s)
-- [/concurrent keyed]
