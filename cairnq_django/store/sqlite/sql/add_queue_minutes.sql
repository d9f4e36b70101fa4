-- Add one flush of worker counts to the per-minute history (docs/admin.md): one row per (queue, minute).
-- A row that exists gets the counts added, so every worker of the fleet adds to the same minute.
-- params: items (JSON array of objects with queue, minute_ms and each count column)
INSERT INTO cairnq_django_queue_minute (queue, minute_ms, succeeded, failed, retried, canceled, pickups, pickup_ms_sum, pickup_le_10ms, pickup_le_50ms, pickup_le_250ms, pickup_le_1s, pickup_le_5s, pickup_le_30s, pickup_le_2min, pickup_slower)
SELECT json_extract(value, '$.queue'), json_extract(value, '$.minute_ms'),
       json_extract(value, '$.succeeded'),
       json_extract(value, '$.failed'),
       json_extract(value, '$.retried'),
       json_extract(value, '$.canceled'),
       json_extract(value, '$.pickups'),
       json_extract(value, '$.pickup_ms_sum'),
       json_extract(value, '$.pickup_le_10ms'),
       json_extract(value, '$.pickup_le_50ms'),
       json_extract(value, '$.pickup_le_250ms'),
       json_extract(value, '$.pickup_le_1s'),
       json_extract(value, '$.pickup_le_5s'),
       json_extract(value, '$.pickup_le_30s'),
       json_extract(value, '$.pickup_le_2min'),
       json_extract(value, '$.pickup_slower')
FROM json_each(%(items)s)
-- SQLite needs a WHERE before ON CONFLICT in INSERT ... SELECT (else it reads ON as a join).
WHERE true
ON CONFLICT (queue, minute_ms) DO UPDATE SET
    succeeded = cairnq_django_queue_minute.succeeded + excluded.succeeded,
    failed = cairnq_django_queue_minute.failed + excluded.failed,
    retried = cairnq_django_queue_minute.retried + excluded.retried,
    canceled = cairnq_django_queue_minute.canceled + excluded.canceled,
    pickups = cairnq_django_queue_minute.pickups + excluded.pickups,
    pickup_ms_sum = cairnq_django_queue_minute.pickup_ms_sum + excluded.pickup_ms_sum,
    pickup_le_10ms = cairnq_django_queue_minute.pickup_le_10ms + excluded.pickup_le_10ms,
    pickup_le_50ms = cairnq_django_queue_minute.pickup_le_50ms + excluded.pickup_le_50ms,
    pickup_le_250ms = cairnq_django_queue_minute.pickup_le_250ms + excluded.pickup_le_250ms,
    pickup_le_1s = cairnq_django_queue_minute.pickup_le_1s + excluded.pickup_le_1s,
    pickup_le_5s = cairnq_django_queue_minute.pickup_le_5s + excluded.pickup_le_5s,
    pickup_le_30s = cairnq_django_queue_minute.pickup_le_30s + excluded.pickup_le_30s,
    pickup_le_2min = cairnq_django_queue_minute.pickup_le_2min + excluded.pickup_le_2min,
    pickup_slower = cairnq_django_queue_minute.pickup_slower + excluded.pickup_slower
