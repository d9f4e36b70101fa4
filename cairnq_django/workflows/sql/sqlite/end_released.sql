-- workflows: end_released
-- End the released nodes of tasks that ended, each with its own state and error, in one statement.
-- A node no longer released was advanced already (by the settlement or the repair pass): it is
-- passed over, so whichever of the two comes second ends nothing.
-- params: ended (JSON array of {"task_id", "state", "error"}), now (process ms)
-- The FROM columns are named apart from the node's: RETURNING may only read the updated table.
UPDATE cairnq_django_workflow_node
SET state = e.new_state, error = e.new_error, ended_at_ms = %(now)s
FROM (
    SELECT json_extract(value, '$.task_id') AS ended_task_id, json_extract(value, '$.state') AS new_state,
           json_extract(value, '$.error') AS new_error
    FROM json_each(%(ended)s)
) AS e
-- The unary + keeps the state test off the index of released nodes (the repair pass's), which a
-- group of 10,000 in flight fills: without statistics SQLite walked it all for each settlement.
WHERE cairnq_django_workflow_node.task_id = e.ended_task_id AND +cairnq_django_workflow_node.state = 'released'
-- has_children: whether the count-down has anything to count (most nodes of a group have none).
RETURNING id, run_id, state,
    EXISTS (SELECT 1 FROM cairnq_django_workflow_edge AS edge
            WHERE edge.parent_id = cairnq_django_workflow_node.id) AS has_children
