-- Headroom of one queue (protocol 3.5): max_depth minus its queued rows. The
-- inner LIMIT stops counting at max_depth, so the cost is bounded by the limit.
-- params: queue, max_depth
SELECT %(max_depth)s::bigint - count(*) AS headroom FROM (
    SELECT 1 FROM cairnq_tasks
    WHERE queue = %(queue)s AND status = 'queued'
    LIMIT %(max_depth)s
) AS counted
