-- Snooze owned tasks in ONE statement: queued at now + each delay_ms with the attempt handed back
-- (it does not count, as in release); cancel wins; ids missing from the answer lost their lease.
-- params: ids (text[]), delays (bigint[], parallel to ids), worker_id
WITH given AS (SELECT %(ids)s::text[] AS ids, %(delays)s::bigint[] AS delays)
UPDATE cairnq_tasks AS t
-- The CASE arms read the row being updated (t): a cancel committed during the lock wait still wins.
SET status = CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN 'canceled' ELSE 'queued' END,
    worker_id = CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN t.worker_id ELSE NULL END,
    lease_until_ms = NULL,
    run_at_ms = CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN t.run_at_ms
                     ELSE (extract(epoch from now()) * 1000)::bigint
                          + (SELECT delays[array_position(ids, t.id)] FROM given) END,
    completed_at_ms = CASE WHEN t.cancel_requested_at_ms IS NOT NULL
                           THEN (extract(epoch from now()) * 1000)::bigint ELSE NULL END,
    progress = CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN t.progress ELSE NULL END,
    message = CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN t.message ELSE NULL END,
    -- Claim counted this attempt; taking it back keeps max_attempts for the runs that end.
    attempt = CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN t.attempt
                   ELSE greatest(t.attempt - 1, 0) END,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
-- Found by id through the primary key whatever the list's length (complete_many.sql says why).
WHERE t.id = ANY((SELECT ids FROM given)::text[])
  AND (t.status = 'running') IS TRUE
  AND t.worker_id = %(worker_id)s
  AND t.lease_until_ms > (extract(epoch from now()) * 1000)::bigint
RETURNING t.id, t.status
