-- Large-row mode, heartbeat_batch step 2 (write): ../heartbeat_batch.sql without RETURNING,
-- restricted to the tasks the pick found owned (in this same IMMEDIATE
-- transaction; the ownership test stays as a second guard).
-- params: picked (JSON array text of ids), ids (JSON array text), worker_id, lease_ms, now (process ms)
UPDATE cairnq_tasks
SET lease_until_ms = %(now)s + %(lease_ms)s,
    updated_at_ms = %(now)s
WHERE id IN (SELECT value FROM json_each(%(ids)s))
  AND +status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > %(now)s
  AND id IN (SELECT value FROM json_each(%(picked)s))
