-- Large-row mode, progress step 2 of 3 (write): ../progress.sql without RETURNING,
-- restricted to the task the pick found owned (in this same IMMEDIATE
-- transaction; the ownership test stays as a second guard).
-- params: picked (JSON array text of ids), id, worker_id, progress (real or null), message (text or null), now (process ms)
UPDATE cairnq_tasks
SET progress = COALESCE(%(progress)s, progress),
    message = COALESCE(%(message)s, message),
    updated_at_ms = %(now)s
WHERE id = %(id)s
  AND status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > %(now)s
  AND id IN (SELECT value FROM json_each(%(picked)s))
