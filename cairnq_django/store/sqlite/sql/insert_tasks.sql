-- Insert many unkeyed queued tasks in one statement (submit_many); return
-- each row's id and stamps. params: rows (JSON array text of objects: id, name, queue, payload and
--   metadata as JSON *text*, max_attempts, priority, delay_ms, parent_id, root_id, correlation_id), now (process ms)
INSERT INTO cairnq_tasks (
    id, name, queue, status, payload, metadata, max_attempts, priority,
    run_at_ms, parent_id, root_id, correlation_id, created_at_ms, updated_at_ms
)
SELECT
    json_extract(r.value, '$.id'), json_extract(r.value, '$.name'),
    json_extract(r.value, '$.queue'), 'queued',
    json_extract(r.value, '$.payload'), json_extract(r.value, '$.metadata'),
    json_extract(r.value, '$.max_attempts'), json_extract(r.value, '$.priority'),
    %(now)s + json_extract(r.value, '$.delay_ms'),
    json_extract(r.value, '$.parent_id'), json_extract(r.value, '$.root_id'),
    json_extract(r.value, '$.correlation_id'), %(now)s, %(now)s
-- One JSON parameter: fixed text, no bound-variable limit; payloads as text come back verbatim.
FROM json_each(%(rows)s) AS r
RETURNING id, created_at_ms, updated_at_ms, run_at_ms
