-- Snooze owned tasks in ONE statement: queued at now + each delay_ms with the attempt handed back
-- (it does not count, as in release); cancel wins; ids missing from the answer lost their lease.
-- params: items (JSON array text of {"id", "delay_ms"}), worker_id, now (process ms)
UPDATE cairnq_tasks
-- Columns are qualified: the FROM relation also has id.
SET status = CASE WHEN cairnq_tasks.cancel_requested_at_ms IS NOT NULL THEN 'canceled' ELSE 'queued' END,
    worker_id = CASE WHEN cairnq_tasks.cancel_requested_at_ms IS NOT NULL
                     THEN cairnq_tasks.worker_id ELSE NULL END,
    lease_until_ms = NULL,
    run_at_ms = CASE WHEN cairnq_tasks.cancel_requested_at_ms IS NOT NULL
                     THEN cairnq_tasks.run_at_ms ELSE %(now)s + s.delay_ms END,
    completed_at_ms = CASE WHEN cairnq_tasks.cancel_requested_at_ms IS NOT NULL THEN %(now)s ELSE NULL END,
    progress = CASE WHEN cairnq_tasks.cancel_requested_at_ms IS NOT NULL
                    THEN cairnq_tasks.progress ELSE NULL END,
    message = CASE WHEN cairnq_tasks.cancel_requested_at_ms IS NOT NULL
                   THEN cairnq_tasks.message ELSE NULL END,
    -- Claim counted this attempt; taking it back keeps max_attempts for the runs that end.
    attempt = CASE WHEN cairnq_tasks.cancel_requested_at_ms IS NOT NULL THEN cairnq_tasks.attempt
                   ELSE max(cairnq_tasks.attempt - 1, 0) END,
    updated_at_ms = %(now)s
FROM (
    SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.delay_ms') AS delay_ms
    FROM json_each(%(items)s)
) AS s
WHERE cairnq_tasks.id = s.id
  -- The unary + keeps the planner off the status index: drive the update from the ids.
  AND +cairnq_tasks.status = 'running'
  AND cairnq_tasks.worker_id = %(worker_id)s
  AND cairnq_tasks.lease_until_ms > %(now)s
RETURNING id, status
