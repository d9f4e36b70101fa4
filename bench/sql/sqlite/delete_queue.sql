-- Empty one queue before a measurement.
-- Parameters: :queue.
DELETE FROM cairnq_tasks WHERE queue = :queue
