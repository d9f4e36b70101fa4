-- workflows: count_down
-- Count down the held children of nodes that just ended: each child once, by how many of its
-- parents are among them. One statement however many nodes ended and however many children
-- each has (fan-in costs one decrement a parent, never a count of the unfinished ones).
-- params: ended (JSON array of {"id", "failed"}: failed is 1 when the parent did not succeed)
WITH ended AS (
    SELECT json_extract(value, '$.id') AS parent, json_extract(value, '$.failed') AS failed
    FROM json_each(%(ended)s)
), counted AS (
    SELECT edge.child_id AS child, count(*) AS parents, sum(ended.failed) AS failed_parents
    FROM ended JOIN cairnq_django_workflow_edge AS edge ON edge.parent_id = ended.parent
    GROUP BY edge.child_id
)
UPDATE cairnq_django_workflow_node
SET parents_left = parents_left - counted.parents, parents_failed = parents_failed + counted.failed_parents
FROM counted
WHERE cairnq_django_workflow_node.id = counted.child AND cairnq_django_workflow_node.state = 'held'
RETURNING id, parents_left, parents_failed, on_parent_failure
