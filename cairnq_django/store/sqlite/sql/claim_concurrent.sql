-- Fleet-limited claim of a name limited by global_concurrency alone (pick; docs/limits.md): count the name's tasks
-- running under an unexpired lease (its live calls: no rate, no global resource, no batch), and pick in claim order
-- what the limit admits. The store leases the pick in the same statement (leasing_claim) and logs no start.
-- params: queues (JSON), name, limit, concurrency, now
WITH live AS (
    SELECT count(*) AS calls
    FROM cairnq_tasks
    WHERE status = 'running'
      -- The partial index's predicate, literally: SQLite matches it term by term.
      AND lease_until_ms IS NOT NULL
      AND lease_until_ms > %(now)s
      AND name = %(name)s
),
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
        LIMIT %(limit)s
    )
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT %(limit)s
)
SELECT id
FROM candidate
ORDER BY priority DESC, run_at_ms, id
LIMIT max(0, min(%(limit)s, %(concurrency)s - (SELECT calls FROM live)))
