-- Is anything of this queue still queued or running? Polled while a drain runs.
-- Parameters: queue.
SELECT EXISTS (
    SELECT 1 FROM cairnq_tasks WHERE queue = %(queue)s AND status IN ('queued', 'running')
)
