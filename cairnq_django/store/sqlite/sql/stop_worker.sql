-- Mark this worker's registry row stopped (a clean stop), with its final counters.
-- params: worker_id, succeeded, failed, now (process ms)
UPDATE cairnq_django_worker
SET stopped_at_ms = %(now)s,
    last_seen_at_ms = %(now)s,
    in_flight = 0,
    per_minute = 0,
    succeeded = %(succeeded)s,
    failed = %(failed)s
WHERE id = %(worker_id)s
RETURNING id
