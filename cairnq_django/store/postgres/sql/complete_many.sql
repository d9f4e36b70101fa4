-- Complete many owned tasks in ONE statement (complete semantics of 3.12 per row):
-- one round trip and one commit per batch; ids missing from the answer lost their lease.
-- params: ids (text[]), results (JSON object text: id -> result, ids whose result is null left out), worker_id
WITH given AS (SELECT %(ids)s::text[] AS ids, %(results)s::jsonb AS results)
UPDATE cairnq_tasks AS t
-- The CASE arms read the row being updated (t): a cancel committed during the lock wait still wins.
SET status = CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN 'canceled' ELSE 'succeeded' END,
    -- Each row's result by its id, a key lookup in one object: a join (planned for a handful of
    -- ids) or a search of an array compared every row with every id.
    result = CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN t.result
                  ELSE (SELECT results FROM given) -> t.id END,
    progress = CASE WHEN t.cancel_requested_at_ms IS NOT NULL THEN t.progress ELSE 1.0 END,
    lease_until_ms = NULL,
    completed_at_ms = (extract(epoch from now()) * 1000)::bigint,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
-- The ids come from a subquery, so the planner sizes the list as a handful whatever its length
-- and reads the primary key; a literal list of hundreds costed a scan of the whole table as
-- cheaper. IS TRUE keeps the status test from being an index condition: the status and lease
-- indexes' 'running' entries are what a held snapshot fills.
WHERE t.id = ANY((SELECT ids FROM given)::text[])
  AND (t.status = 'running') IS TRUE
  AND t.worker_id = %(worker_id)s
  AND t.lease_until_ms > (extract(epoch from now()) * 1000)::bigint
RETURNING t.id, t.status
