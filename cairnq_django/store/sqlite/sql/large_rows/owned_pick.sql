-- Large-row mode, step 1 (pick) of heartbeat_batch and release: the listed
-- tasks this worker still owns, with their cancel request (heartbeat_batch answers with it).
-- params: ids (JSON array text), worker_id, now (process ms)
SELECT t.id, t.cancel_requested_at_ms
FROM json_each(%(ids)s) AS listed
JOIN cairnq_tasks AS t ON t.id = listed.value
WHERE +t.status = 'running'
  AND t.worker_id = %(worker_id)s
  AND t.lease_until_ms > %(now)s
