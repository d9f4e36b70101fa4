-- Delete the probe tasks of a claim-cost measurement: whatever is running or due
-- in the queue. The backing-off history is due 30 days out and stays.
-- Parameters: :queue, :now (ms).
DELETE FROM cairnq_tasks
WHERE queue = :queue
  AND (status = 'running' OR (status = 'queued' AND run_at_ms < :now + 86400000))
