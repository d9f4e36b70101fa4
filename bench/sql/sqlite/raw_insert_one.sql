-- Insert one queued task, as a protocol v1 submit without a key would.
-- Parameters (stdlib sqlite3 named style): :id, :name, :queue, :payload (JSON text), :now (ms).
-- SQLite takes "now" from the writing process (protocol 2.1).
INSERT INTO cairnq_tasks
    (id, name, queue, status, payload, metadata, max_attempts, priority,
     run_at_ms, root_id, created_at_ms, updated_at_ms)
VALUES (:id, :name, :queue, 'queued', :payload, '{}', 3, 0, :now, :id, :now, :now)
