-- Fail many owned tasks in ONE statement, each with its own envelope,
-- retryability and delay (3.13 per row, cancel wins); ids missing from the answer lost their lease.
-- params: ids (text[]), errors (text[] of JSON text), retryable (boolean[]), delays (bigint[]), parallel; worker_id
WITH given AS (
    SELECT %(ids)s::text[] AS ids, %(errors)s::text[] AS errors,
           %(retryable)s::boolean[] AS retryable, %(delays)s::bigint[] AS delays
)
UPDATE cairnq_tasks AS t
SET (status, error, worker_id, lease_until_ms, run_at_ms, completed_at_ms, progress, message, updated_at_ms) = (
    SELECT CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN 'canceled'
                WHEN f.again THEN 'queued' ELSE 'failed' END,
           f.error::jsonb,
           CASE WHEN f.again THEN NULL ELSE t.worker_id END,
           NULL::bigint,
           CASE WHEN f.again THEN f.now_ms + f.delay_ms ELSE t.run_at_ms END,
           CASE WHEN f.again THEN NULL ELSE f.now_ms END,
           CASE WHEN f.again THEN NULL ELSE t.progress END,
           CASE WHEN f.again THEN NULL ELSE t.message END,
           f.now_ms
    -- This row's envelope, retryability and delay by its id's place in the parallel arrays;
    -- 'again' reads the row being updated (t): a cancel committed during the lock wait still wins.
    FROM (SELECT g.errors[i] AS error, g.delays[i] AS delay_ms,
                 t.cancel_requested_at_ms IS NULL AND g.retryable[i] AND t.attempt < t.max_attempts AS again,
                 (extract(epoch from now()) * 1000)::bigint AS now_ms
          FROM given AS g, array_position(g.ids, t.id) AS i) AS f
)
-- Found by id through the primary key whatever the list's length (complete_many.sql says why).
WHERE t.id = ANY((SELECT ids FROM given)::text[])
  AND (t.status = 'running') IS TRUE
  AND t.worker_id = %(worker_id)s
  AND t.lease_until_ms > (extract(epoch from now()) * 1000)::bigint
RETURNING t.id, t.status
