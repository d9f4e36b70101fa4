-- workflows: end_held
-- End held nodes (skipped, or canceled by a parent's failure or the run's cancel), each with its
-- own state and error; a node already released or ended is passed over.
-- params: ended (JSON array of {"id", "state", "error"}), now (process ms)
UPDATE cairnq_django_workflow_node
SET state = e.new_state, error = e.new_error, ended_at_ms = %(now)s
FROM (
    SELECT json_extract(value, '$.id') AS ended_id, json_extract(value, '$.state') AS new_state,
           json_extract(value, '$.error') AS new_error
    FROM json_each(%(ended)s)
) AS e
WHERE cairnq_django_workflow_node.id = e.ended_id AND cairnq_django_workflow_node.state = 'held'
-- has_children: whether the count-down has anything to count (most nodes of a group have none).
RETURNING id, run_id, state,
    EXISTS (SELECT 1 FROM cairnq_django_workflow_edge AS edge
            WHERE edge.parent_id = cairnq_django_workflow_node.id) AS has_children
