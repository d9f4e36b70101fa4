-- Large-row mode, claim step 1 of 3 (pick): the ids claim would lease, in
-- claim order -- the selection of ../claim_one_queue.sql, unchanged.
-- params: queue, names (JSON array text or null = any name), limit, now (process ms)
SELECT id FROM cairnq_tasks
WHERE queue = %(queue)s
  AND status = 'queued'
  AND (%(names)s IS NULL OR name IN (SELECT value FROM json_each(%(names)s)))
  AND run_at_ms <= %(now)s
ORDER BY priority DESC, run_at_ms, id
LIMIT %(limit)s
