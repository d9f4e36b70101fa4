-- workflows: count_down
-- Count down the held children of nodes that just ended: each child once, by how many of its
-- parents are among them. One statement however many nodes ended and however many children
-- each has (fan-in costs one decrement a parent, never a count of the unfinished ones).
-- params: ended (JSON array of {"id", "failed"}: failed is 1 when the parent did not succeed)
-- The ids are also given as an array from a subquery, which the planner sizes as a handful
-- and reads by index; joined to the JSON rows alone, it costed them at 100 and hashed a
-- scan of the whole table.
WITH ended AS (
    SELECT * FROM jsonb_to_recordset(%(ended)s::jsonb) AS e(id bigint, failed int)
), counted AS (
    SELECT edge.child_id, count(*) AS parents, sum(ended.failed) AS failed
    FROM ended JOIN cairnq_django_workflow_edge AS edge ON edge.parent_id = ended.id
    WHERE edge.parent_id = ANY(ARRAY(SELECT (x ->> 'id')::bigint FROM jsonb_array_elements(%(ended)s::jsonb) AS x))
    GROUP BY edge.child_id
)
UPDATE cairnq_django_workflow_node AS n
SET parents_left = n.parents_left - counted.parents, parents_failed = n.parents_failed + counted.failed
FROM counted
WHERE n.id = ANY(ARRAY(SELECT child_id FROM counted)) AND n.id = counted.child_id AND n.state = 'held'
RETURNING n.id, n.parents_left, n.parents_failed, n.on_parent_failure
