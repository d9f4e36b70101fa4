-- Refresh this worker's registry row; the store renews its leases (heartbeat_batch) in the same transaction.
-- params: worker_id, host, pid, queues, names, resources, global_resources (JSON text), concurrency, version,
--   interval_ms, in_flight, succeeded, failed, per_minute, now (process ms)
INSERT INTO cairnq_django_worker (
    id, host, pid, queues, names, concurrency, resources, global_resources, version,
    heartbeat_interval_ms, started_at_ms, last_seen_at_ms, stopped_at_ms, in_flight, succeeded, failed,
    per_minute
)
VALUES (
    %(worker_id)s, %(host)s, %(pid)s, %(queues)s, %(names)s, %(concurrency)s,
    %(resources)s, %(global_resources)s, %(version)s, %(interval_ms)s,
    %(now)s, %(now)s, NULL, %(in_flight)s, %(succeeded)s, %(failed)s, %(per_minute)s
)
-- The first beat (at start-up) inserts; later ones touch only what changes. A row pruned
-- while the worker was cut off comes back whole, its start time then the return.
ON CONFLICT (id) DO UPDATE SET
    last_seen_at_ms = excluded.last_seen_at_ms,
    in_flight = excluded.in_flight,
    succeeded = excluded.succeeded,
    failed = excluded.failed,
    per_minute = excluded.per_minute
