-- Large-row mode, claim step 1 of 3 (pick): the ids claim would lease, in
-- claim order -- the selection of ../claim.sql, unchanged.
-- params: queues (JSON array text), names (JSON array text or null = any name), limit, now (process ms)
SELECT head.id
FROM json_each(%(queues)s) AS wanted
JOIN cairnq_tasks AS head ON head.id IN (
    SELECT id FROM cairnq_tasks
    WHERE queue = wanted.value
      AND status = 'queued'
      AND (%(names)s IS NULL OR name IN (SELECT value FROM json_each(%(names)s)))
      AND run_at_ms <= %(now)s
    ORDER BY priority DESC, run_at_ms, id
    LIMIT %(limit)s
)
ORDER BY head.priority DESC, head.run_at_ms, head.id
LIMIT %(limit)s
