-- Stream many unkeyed queued tasks into cairnq_tasks (submit_many, psycopg 3).
-- params: none; each row is sent as COPY data, in the column order below:
--   id, name, queue, status ('queued'), payload and metadata (JSON text),
--   max_attempts, priority, run_at_ms, parent_id, root_id, correlation_id,
--   created_at_ms, updated_at_ms
-- COPY moves rows without a statement per row and without parsing one large
-- parameter: the client spells each row as COPY text (store/_copy_text.py)
-- while the server inserts the ones already sent. COPY cannot read the
-- clock, so the store reads it once (now_ms.sql) in the same transaction and
-- every row carries that reading, as insert_tasks.sql gives every row of a
-- batch one clock reading.
COPY cairnq_tasks (
    id, name, queue, status, payload, metadata, max_attempts, priority,
    run_at_ms, parent_id, root_id, correlation_id, created_at_ms, updated_at_ms
) FROM STDIN
