-- Cancel every listed live task in one statement (cancel semantics of 3.6 per row).
-- params: ids (JSON array text), now (process ms)
UPDATE cairnq_tasks
SET status = CASE WHEN status = 'queued' THEN 'canceled' ELSE status END,
    completed_at_ms = CASE WHEN status = 'queued' THEN %(now)s ELSE completed_at_ms END,
    cancel_requested_at_ms = CASE WHEN status = 'running' THEN %(now)s
                                  ELSE cancel_requested_at_ms END,
    updated_at_ms = %(now)s
WHERE id IN (SELECT value FROM json_each(%(ids)s)) AND status IN ('queued', 'running')
RETURNING *
