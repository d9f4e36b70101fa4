-- Refresh this worker's registry row and renew its leases (3.10) in one statement: one write per beat.
-- params: worker_id, host, pid, queues, names, resources, global_resources (JSON text), concurrency, version,
--   interval_ms, in_flight, succeeded, failed, per_minute, ids (text[], may be empty), lease_ms
WITH seen AS (
    INSERT INTO cairnq_django_worker (
        id, host, pid, queues, names, concurrency, resources, global_resources, version,
        heartbeat_interval_ms, started_at_ms, last_seen_at_ms, stopped_at_ms, in_flight, succeeded, failed,
        per_minute
    )
    VALUES (
        %(worker_id)s, %(host)s, %(pid)s, %(queues)s::jsonb, %(names)s::jsonb, %(concurrency)s,
        %(resources)s::jsonb, %(global_resources)s::jsonb, %(version)s, %(interval_ms)s,
        (extract(epoch from now()) * 1000)::bigint, (extract(epoch from now()) * 1000)::bigint, NULL,
        %(in_flight)s, %(succeeded)s, %(failed)s, %(per_minute)s
    )
    -- The first beat (at start-up) inserts; later ones touch only what changes. A row pruned
    -- while the worker was cut off comes back whole, its start time then the return.
    ON CONFLICT (id) DO UPDATE SET
        last_seen_at_ms = EXCLUDED.last_seen_at_ms,
        in_flight = EXCLUDED.in_flight,
        succeeded = EXCLUDED.succeeded,
        failed = EXCLUDED.failed,
        per_minute = EXCLUDED.per_minute
)
-- A data-modifying CTE runs whether or not the UPDATE reads it, so an idle beat (no ids) still refreshes.
UPDATE cairnq_tasks
SET lease_until_ms = (extract(epoch from now()) * 1000)::bigint + %(lease_ms)s::bigint,
    updated_at_ms = (extract(epoch from now()) * 1000)::bigint
-- Found by id through the primary key whatever the list's length (complete_many.sql says why).
WHERE id = ANY(ARRAY(SELECT unnest(%(ids)s::text[])))
  AND (status = 'running') IS TRUE
  AND worker_id = %(worker_id)s
  AND lease_until_ms > (extract(epoch from now()) * 1000)::bigint
-- Ids missing from the answer were not renewed: the caller reads lease loss from absence.
RETURNING id, cancel_requested_at_ms
