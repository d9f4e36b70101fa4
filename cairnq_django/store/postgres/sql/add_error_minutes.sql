-- Add one flush of worker error counts to the triage history (docs/admin.md): one row per (queue, minute, name, type, message).
-- A row that exists gets the counts added, so every worker of the fleet adds to the same minute.
-- params: items (JSON array of objects with queue, minute_ms, name, error_type, message, failed, retried)
INSERT INTO cairnq_django_error_minute (queue, minute_ms, name, error_type, message, failed, retried)
SELECT r.queue, r.minute_ms, r.name, r.error_type, r.message, r.failed, r.retried
FROM jsonb_to_recordset(%(items)s::jsonb) AS r(
    queue text, minute_ms bigint, name text, error_type text, message text, failed bigint, retried bigint
)
ON CONFLICT (queue, minute_ms, name, error_type, message) DO UPDATE SET
    failed = cairnq_django_error_minute.failed + excluded.failed,
    retried = cairnq_django_error_minute.retried + excluded.retried
