-- Cancel one live task (protocol 3.6): queued -> canceled now; running -> stays
-- running with cancel_requested_at_ms re-stamped (its worker finishes it as
-- canceled). Terminal or missing rows match nothing.
-- params: id, now (process ms)
UPDATE cairnq_tasks
SET status = CASE WHEN status = 'queued' THEN 'canceled' ELSE status END,
    completed_at_ms = CASE WHEN status = 'queued' THEN %(now)s ELSE completed_at_ms END,
    cancel_requested_at_ms = CASE WHEN status = 'running' THEN %(now)s
                                  ELSE cancel_requested_at_ms END,
    updated_at_ms = %(now)s
WHERE id = %(id)s AND status IN ('queued', 'running')
RETURNING *
