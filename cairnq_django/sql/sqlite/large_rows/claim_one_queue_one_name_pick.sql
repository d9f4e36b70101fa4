-- Large-row mode, claim step 1 of 3 (pick): the ids claim would lease, in
-- claim order -- the selection of ../claim_one_queue_one_name.sql, unchanged.
-- params: queue, name, limit, now (process ms)
SELECT id FROM cairnq_tasks
WHERE queue = %(queue)s
  AND status = 'queued'
  AND name = %(name)s
  AND run_at_ms <= %(now)s
ORDER BY priority DESC, run_at_ms, id
LIMIT %(limit)s
