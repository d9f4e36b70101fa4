-- Add one flush of worker error counts to the triage history (docs/admin.md): one row per (queue, minute, name, type, message).
-- A row that exists gets the counts added, so every worker of the fleet adds to the same minute.
-- params: items (JSON array of objects with queue, minute_ms, name, error_type, message, failed, retried)
INSERT INTO cairnq_django_error_minute (queue, minute_ms, name, error_type, message, failed, retried)
SELECT json_extract(value, '$.queue'), json_extract(value, '$.minute_ms'), json_extract(value, '$.name'),
       json_extract(value, '$.error_type'), json_extract(value, '$.message'),
       json_extract(value, '$.failed'), json_extract(value, '$.retried')
FROM json_each(%(items)s)
-- SQLite needs a WHERE before ON CONFLICT in INSERT ... SELECT (else it reads ON as a join).
WHERE true
ON CONFLICT (queue, minute_ms, name, error_type, message) DO UPDATE SET
    failed = cairnq_django_error_minute.failed + excluded.failed,
    retried = cairnq_django_error_minute.retried + excluded.retried
