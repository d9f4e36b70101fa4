-- Large-row mode, step 3 of 3 (read) of claims and single-task writes: the
-- picked rows, in pick order, with the claim's columns (a payload over 256 KiB stays behind).
-- params: picked (JSON array text of ids)
SELECT t.id, t.name, t.queue, t.status,
    CASE WHEN length(CAST(t.payload AS BLOB)) <= 262144 THEN t.payload END AS payload,
    CASE WHEN length(CAST(t.payload AS BLOB)) > 262144 THEN length(CAST(t.payload AS BLOB)) END AS payload_bytes,
    t.result, t.error, t.metadata, t.progress, t.message, t.attempt,
    t.max_attempts, t.priority, t.worker_id, t.lease_until_ms, t.run_at_ms, t.cancel_requested_at_ms,
    t.parent_id, t.root_id, t.correlation_id, t.created_at_ms, t.updated_at_ms, t.completed_at_ms
FROM json_each(%(picked)s) AS picked
JOIN cairnq_tasks AS t ON t.id = picked.value
ORDER BY picked.key
