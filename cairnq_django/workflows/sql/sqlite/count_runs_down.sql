-- workflows: count_runs_down
-- Count runs down by the nodes that ended in them, and finish those with none left: a run that
-- is still running reads failed when a node failed, else succeeded; a canceled run keeps its
-- status and gets its finish time. One statement for every run a settlement touched.
-- params: runs (JSON array of {"run_id", "ended", "failed"}), now (process ms)
-- SET's right-hand sides all read the row as it was before this update.
UPDATE cairnq_django_workflow
SET nodes_left = nodes_left - r.ended_now,
    nodes_failed = nodes_failed + r.failed_now,
    status = CASE
        WHEN nodes_left - r.ended_now > 0 OR status <> 'running' THEN status
        WHEN nodes_failed + r.failed_now > 0 THEN 'failed'
        ELSE 'succeeded' END,
    finished_at_ms = CASE
        WHEN nodes_left - r.ended_now > 0 THEN finished_at_ms
        ELSE coalesce(finished_at_ms, %(now)s) END
FROM (
    SELECT json_extract(value, '$.run_id') AS counted_run, json_extract(value, '$.ended') AS ended_now,
           json_extract(value, '$.failed') AS failed_now
    FROM json_each(%(runs)s)
) AS r
WHERE cairnq_django_workflow.id = r.counted_run
RETURNING id, nodes_left, nodes_failed, kind
