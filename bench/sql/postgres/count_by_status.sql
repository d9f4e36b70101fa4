-- Count one queue's rows by status (verifies a drain and sizes the claim-cost table).
-- Parameters: queue.
SELECT status, count(*) FROM cairnq_tasks WHERE queue = %(queue)s GROUP BY status
