-- Renew one lease this worker owns now (protocol 3.10); no row means LostLease.
-- params: id, worker_id, lease_ms, now (process ms)
-- The whole row comes back so the caller sees cancel_requested_at_ms.
UPDATE cairnq_tasks
SET lease_until_ms = %(now)s + %(lease_ms)s,
    updated_at_ms = %(now)s
WHERE id = %(id)s
  AND status = 'running'
  AND worker_id = %(worker_id)s
  AND lease_until_ms > %(now)s
RETURNING *
