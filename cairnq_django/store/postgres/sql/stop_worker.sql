-- Mark this worker's registry row stopped (a clean stop), with its final counters.
-- params: worker_id, succeeded, failed
UPDATE cairnq_django_worker
SET stopped_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint,
    last_seen_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint,
    in_flight = 0,
    per_minute = 0,
    succeeded = %(succeeded)s,
    failed = %(failed)s
WHERE id = %(worker_id)s
RETURNING id
