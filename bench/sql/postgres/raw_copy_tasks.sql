-- Stream many queued tasks into cairnq_tasks: the raw ceiling's bulk enqueue.
-- Rows follow as COPY data in this column order: id, name, queue, status,
-- payload (JSON text), metadata, max_attempts, priority, run_at_ms, root_id,
-- created_at_ms, updated_at_ms. COPY cannot read the clock: the rows carry one
-- reading of it (raw_now_ms.sql) taken in the same transaction.
COPY cairnq_tasks
    (id, name, queue, status, payload, metadata, max_attempts, priority,
     run_at_ms, root_id, created_at_ms, updated_at_ms)
FROM STDIN
