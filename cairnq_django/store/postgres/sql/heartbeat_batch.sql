-- Renew, in one statement, every listed lease this worker still owns (3.10).
-- params: ids (text[]), worker_id, lease_ms
UPDATE cairnq_tasks
SET lease_until_ms = (extract(epoch from now()) * 1000)::bigint + %(lease_ms)s::bigint,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
-- Found by id through the primary key whatever the list's length (complete_many.sql says why).
WHERE id = ANY(ARRAY(SELECT unnest(%(ids)s::text[])))
  AND (status = 'running') IS TRUE
  AND worker_id = %(worker_id)s
  AND lease_until_ms > (extract(epoch from now()) * 1000)::bigint
-- Ids missing from the answer were not renewed: the caller reads lease loss from absence.
RETURNING id, cancel_requested_at_ms
