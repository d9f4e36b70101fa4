-- Hand owned running tasks back (worker drain deadline) without counting the
-- attempt: queued now, owner, lease and progress cleared, attempt decremented; cancel wins.
-- params: ids (text[]), worker_id
UPDATE cairnq_tasks
SET status = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN 'canceled' ELSE 'queued' END,
    worker_id = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN worker_id ELSE NULL END,
    lease_until_ms = NULL,
    run_at_ms = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN run_at_ms
                     ELSE (extract(epoch from now()) * 1000)::bigint END,
    completed_at_ms = CASE WHEN cancel_requested_at_ms IS NOT NULL
                           THEN (extract(epoch from now()) * 1000)::bigint ELSE NULL END,
    progress = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN progress ELSE NULL END,
    message = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN message ELSE NULL END,
    attempt = CASE WHEN cancel_requested_at_ms IS NOT NULL THEN attempt
                   ELSE greatest(attempt - 1, 0) END,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
-- Found by id through the primary key whatever the list's length (complete_many.sql says why).
WHERE id = ANY(ARRAY(SELECT unnest(%(ids)s::text[])))
  AND (status = 'running') IS TRUE
  AND worker_id = %(worker_id)s
  AND lease_until_ms > (extract(epoch from now()) * 1000)::bigint
RETURNING id
