-- workflows: count_callbacks_down
-- Count the held callbacks of batches down by the ends in each (a member's end or the batch's
-- close), found by the run's unique (run, name) index however many members the batch has.
-- params: runs (JSON array of {"run_id", "ended", "failed"}, batch runs only)
UPDATE cairnq_django_workflow_node
SET parents_left = parents_left - r.ended_now, parents_failed = parents_failed + r.failed_now
FROM (
    SELECT json_extract(value, '$.run_id') AS counted_run, json_extract(value, '$.ended') AS ended_now,
           json_extract(value, '$.failed') AS failed_now
    FROM json_each(%(runs)s)
) AS r
WHERE cairnq_django_workflow_node.run_id = r.counted_run
  AND cairnq_django_workflow_node.name IN ('on_success', 'on_failure', 'on_finish')
  AND cairnq_django_workflow_node.state = 'held'
RETURNING id, parents_left, parents_failed, name
