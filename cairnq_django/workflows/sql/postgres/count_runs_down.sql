-- workflows: count_runs_down
-- Count runs down by the nodes that ended in them, and finish those with none left: a run that
-- is still running reads failed when a node failed, else succeeded; a canceled run keeps its
-- status and gets its finish time. One statement for every run a settlement touched.
-- params: runs (JSON array of {"run_id", "ended", "failed"})
-- The ids are also given as an array from a subquery, which the planner sizes as a handful
-- and reads by index; joined to the JSON rows alone, it costed them at 100 and hashed a
-- scan of the whole table.
UPDATE cairnq_django_workflow AS w
SET nodes_left = w.nodes_left - r.ended,
    nodes_failed = w.nodes_failed + r.failed,
    status = CASE
        WHEN w.nodes_left - r.ended > 0 OR w.status <> 'running' THEN w.status
        WHEN w.nodes_failed + r.failed > 0 THEN 'failed'
        ELSE 'succeeded' END,
    finished_at_ms = CASE
        WHEN w.nodes_left - r.ended > 0 THEN w.finished_at_ms
        ELSE coalesce(w.finished_at_ms, (extract(epoch from clock_timestamp()) * 1000)::bigint) END
FROM jsonb_to_recordset(%(runs)s::jsonb) AS r(run_id text, ended int, failed int)
WHERE w.id = ANY(ARRAY(SELECT x ->> 'run_id' FROM jsonb_array_elements(%(runs)s::jsonb) AS x))
  AND w.id = r.run_id
RETURNING w.id, w.nodes_left, w.nodes_failed, w.kind
