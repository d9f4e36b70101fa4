-- Complete many owned tasks in ONE statement (complete semantics of 3.12 per row):
-- one round trip and one commit per batch; ids missing from the answer lost their lease.
-- params: ids (text[]), results (text[] of JSON text or null, parallel to ids), worker_id
UPDATE cairnq_tasks AS t
-- The CASE arms read the row being updated (t): a cancel committed during the lock wait still wins.
SET status = CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN 'canceled' ELSE 'succeeded' END,
    result = CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN t.result ELSE r.result::jsonb END,
    progress = CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN t.progress ELSE 1.0 END,
    lease_until_ms = NULL,
    completed_at_ms = (extract(epoch from now()) * 1000)::bigint,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
FROM unnest(%(ids)s::text[], %(results)s::text[]) AS r(id, result)
WHERE t.id = r.id
-- IS TRUE makes the status test no index condition: the rows are found by id (the primary key),
-- never through the 'running' entries of the status or lease index, which a held snapshot
-- fills with every task run since and statistics taken while none ran count as one row.
  AND (t.status = 'running') IS TRUE
  AND t.worker_id = %(worker_id)s
  AND t.lease_until_ms > (extract(epoch from now()) * 1000)::bigint
RETURNING t.id, t.status
