-- workflows: end_released
-- End the released nodes of tasks that ended, each with its own state and error, in one statement.
-- A node no longer released was advanced already (by the settlement or the repair pass): it is
-- passed over, so whichever of the two comes second ends nothing.
-- params: ended (JSON array of {"task_id", "state", "error"})
-- The ids are also given as an array from a subquery, which the planner sizes as a handful
-- and reads by index; joined to the JSON rows alone, it costed them at 100 and hashed a
-- scan of the whole table. IS TRUE keeps the state test off the index of released nodes
-- (the repair pass's), which a group of 10,000 in flight fills: the task id finds the row.
UPDATE cairnq_django_workflow_node AS n
SET state = e.state, error = e.error, ended_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
FROM jsonb_to_recordset(%(ended)s::jsonb) AS e(task_id text, state text, error text)
WHERE n.task_id = ANY(ARRAY(SELECT x ->> 'task_id' FROM jsonb_array_elements(%(ended)s::jsonb) AS x))
  AND n.task_id = e.task_id AND (n.state = 'released') IS TRUE
-- has_children: whether the count-down has anything to count (most nodes of a group have none).
RETURNING n.id, n.run_id, n.state,
    EXISTS (SELECT 1 FROM cairnq_django_workflow_edge AS edge WHERE edge.parent_id = n.id) AS has_children
