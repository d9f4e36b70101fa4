-- Large-row mode, claim step 2 of 3 (write): lease the picked tasks to
-- worker_id (protocol 3.9 step 2b) without RETURNING; the pick ran in this IMMEDIATE transaction.
-- params: picked (JSON array text of ids), worker_id, lease_ms, now (process ms)
UPDATE cairnq_tasks
SET status = 'running',
    worker_id = %(worker_id)s,
    lease_until_ms = %(now)s + %(lease_ms)s,
    attempt = attempt + 1,
    updated_at_ms = %(now)s
WHERE id IN (SELECT value FROM json_each(%(picked)s))
  -- Unary +: the status test must not pick the index. By status SQLite walks every queued row; by id, one per pick.
  AND +status = 'queued'
