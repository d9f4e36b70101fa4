-- Add one flush of worker counts to the per-minute history (docs/admin.md): one row per (queue, minute).
-- A row that exists gets the counts added, so every worker of the fleet adds to the same minute.
-- params: items (JSON array of objects with queue, minute_ms and each count column)
INSERT INTO cairnq_django_queue_minute (queue, minute_ms, succeeded, failed, retried, canceled, pickups, pickup_ms_sum, pickup_le_10ms, pickup_le_50ms, pickup_le_250ms, pickup_le_1s, pickup_le_5s, pickup_le_30s, pickup_le_2min, pickup_slower)
SELECT r.queue, r.minute_ms, r.succeeded, r.failed, r.retried, r.canceled, r.pickups, r.pickup_ms_sum, r.pickup_le_10ms, r.pickup_le_50ms, r.pickup_le_250ms, r.pickup_le_1s, r.pickup_le_5s, r.pickup_le_30s, r.pickup_le_2min, r.pickup_slower
FROM jsonb_to_recordset(%(items)s::jsonb) AS r(
    queue text, minute_ms bigint, succeeded bigint, failed bigint, retried bigint, canceled bigint, pickups bigint, pickup_ms_sum bigint, pickup_le_10ms bigint, pickup_le_50ms bigint, pickup_le_250ms bigint, pickup_le_1s bigint, pickup_le_5s bigint, pickup_le_30s bigint, pickup_le_2min bigint, pickup_slower bigint
)
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
