-- workflows: count_callbacks_down
-- Count the held callbacks of batches down by the ends in each (a member's end or the batch's
-- close), found by the run's unique (run, name) index however many members the batch has.
-- params: runs (JSON array of {"run_id", "ended", "failed"}, batch runs only)
-- The ids are also given as an array from a subquery, which the planner sizes as a handful
-- and reads by index; joined to the JSON rows alone, it costed them at 100 and hashed a
-- scan of the whole table.
UPDATE cairnq_django_workflow_node AS n
SET parents_left = n.parents_left - r.ended, parents_failed = n.parents_failed + r.failed
FROM jsonb_to_recordset(%(runs)s::jsonb) AS r(run_id text, ended int, failed int)
WHERE n.run_id = ANY(ARRAY(SELECT x ->> 'run_id' FROM jsonb_array_elements(%(runs)s::jsonb) AS x))
  AND n.run_id = r.run_id AND n.name IN ('on_success', 'on_failure', 'on_finish') AND n.state = 'held'
RETURNING n.id, n.parents_left, n.parents_failed, n.name
