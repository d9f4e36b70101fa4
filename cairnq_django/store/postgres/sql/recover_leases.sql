-- Recover every expired lease in the table (protocol 3.9 step 2a), any queue,
-- any name; cancel wins, attempts left -> queued, else failed with the lease-expired envelope.
-- params: lease_expired_error (JSON text), synchronous_commit (text or null)

-- SET LOCAL of synchronous_commit, as in the claim statements.
WITH commit_mode AS MATERIALIZED (
    SELECT set_config(
        'synchronous_commit',
        COALESCE(%(synchronous_commit)s::text, current_setting('synchronous_commit')),
        true
    ) AS applied
),
-- SKIP LOCKED: a row another recoverer or its owner holds is left to them; no deadlock.
lapsed AS MATERIALIZED (
    SELECT ctid FROM cairnq_tasks
    WHERE status = 'running'
      AND lease_until_ms IS NOT NULL
      AND lease_until_ms <= (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint)
    FOR UPDATE SKIP LOCKED
),
-- Running rows with no lease (a foreign writer): nobody owns them; by index, 1000 a session.
leaseless AS MATERIALIZED (
    SELECT ctid FROM cairnq_tasks
    WHERE status = 'running'
      AND lease_until_ms IS NULL
    ORDER BY completed_at_ms
    LIMIT 1000
    FOR UPDATE SKIP LOCKED
)
UPDATE cairnq_tasks AS t
SET status = CASE
        WHEN t.cancel_requested_at_ms IS NOT NULL THEN 'canceled'
        WHEN t.attempt < t.max_attempts THEN 'queued'
        ELSE 'failed' END,
    worker_id = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND t.attempt < t.max_attempts THEN NULL
        ELSE t.worker_id END,
    lease_until_ms = NULL,
    run_at_ms = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND t.attempt < t.max_attempts
        THEN (extract(epoch from clock_timestamp()) * 1000)::bigint
        ELSE t.run_at_ms END,
    completed_at_ms = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND t.attempt < t.max_attempts THEN t.completed_at_ms
        ELSE (extract(epoch from clock_timestamp()) * 1000)::bigint END,
    error = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND t.attempt >= t.max_attempts
        THEN %(lease_expired_error)s::jsonb
        ELSE t.error END,
    progress = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND t.attempt < t.max_attempts THEN NULL
        ELSE t.progress END,
    message = CASE
        WHEN t.cancel_requested_at_ms IS NULL AND t.attempt < t.max_attempts THEN NULL
        ELSE t.message END,
    updated_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
FROM commit_mode
-- By ctid: a TID scan whatever the estimates, as in claim.sql.
WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM lapsed UNION ALL SELECT ctid FROM leaseless))
RETURNING t.id, t.status, t.queue, t.name
