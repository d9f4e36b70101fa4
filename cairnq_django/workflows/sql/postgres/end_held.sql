-- workflows: end_held
-- End held nodes (skipped, or canceled by a parent's failure or the run's cancel), each with its
-- own state and error; a node already released or ended is passed over.
-- params: ended (JSON array of {"id", "state", "error"})
-- The ids are also given as an array from a subquery, which the planner sizes as a handful
-- and reads by index; joined to the JSON rows alone, it costed them at 100 and hashed a
-- scan of the whole table.
UPDATE cairnq_django_workflow_node AS n
SET state = e.state, error = e.error, ended_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
FROM jsonb_to_recordset(%(ended)s::jsonb) AS e(id bigint, state text, error text)
WHERE n.id = ANY(ARRAY(SELECT (x ->> 'id')::bigint FROM jsonb_array_elements(%(ended)s::jsonb) AS x))
  AND n.id = e.id AND n.state = 'held'
-- has_children: whether the count-down has anything to count (most nodes of a group have none).
RETURNING n.id, n.run_id, n.state,
    EXISTS (SELECT 1 FROM cairnq_django_workflow_edge AS edge WHERE edge.parent_id = n.id) AS has_children
