-- Delete the probe tasks of a claim-cost measurement: whatever is running or due
-- in the queue. The backing-off history is due 30 days out and stays.
-- Parameters: queue.
DELETE FROM cairnq_tasks
WHERE queue = %(queue)s
  AND (status = 'running'
       OR (status = 'queued'
           AND run_at_ms < (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 86400000))
