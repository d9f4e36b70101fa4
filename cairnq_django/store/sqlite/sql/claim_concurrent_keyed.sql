-- Fleet-limited claim of a keyed name limited by global_concurrency alone (pick; docs/limits.md): count each key's
-- tasks running under an unexpired lease (its live calls: no rate, no global resource, and a keyed name has no
-- batch), and pick in claim order what the limit admits. The store leases the pick in the same statement
-- (leasing_claim) and logs no start.
-- params: queues (JSON), name, limit, concurrency, head (rows of the first read), scan (of the read past its keys), now
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
-- Each queue's first head rows in cairnq_tasks_claim_name_idx order, saturated keys skipped so they hide no other key.
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
        LIMIT %(head)s
    )
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT %(head)s
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
SELECT c.id
FROM ranked AS c
LEFT JOIN room AS m ON m.limit_key = c.limit_key
WHERE c.nth <= coalesce(m.room, %(concurrency)s)
ORDER BY c.priority DESC, c.run_at_ms, c.id
LIMIT max(0, %(limit)s)
