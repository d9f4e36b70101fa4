-- Recover every expired lease in the table (protocol 3.9 step 2a), any queue,
-- any name. Per row, cancel wins: cancel requested -> canceled; attempts left ->
-- queued for redelivery (progress of the dead attempt cleared); otherwise failed
-- with the lease-expired envelope. Every branch clears the lease.
-- params: lease_expired_error (JSON text), synchronous_commit (text or null)
-- The candidates are locked FOR UPDATE SKIP LOCKED in a MATERIALIZED CTE (run
-- once; a re-scanned locking subquery misbehaves inside an UPDATE): a row
-- another worker is recovering, or its owner is settling right now, is skipped
-- and that transaction's outcome stands; no two recoverers deadlock. The clock is
-- a scalar subquery so it bounds a range of the partial cairnq_tasks_lease_idx.
-- A running row with no lease at all (a foreign writer broke the lease
-- invariant) is recovered the same way: nobody can own it, so without this it
-- would stay running forever. The lease index leaves such rows out; they are
-- found among the running rows through cairnq_tasks_status_completed_idx, in
-- its order and at most 1000 a session (the probe asks again while any are
-- left), so the planner walks the index instead of scanning the table.
-- The locked rows reach the UPDATE as one array of their ctids, so it is a TID
-- scan whatever the estimates (as in claim.sql, which explains why a locked
-- row's ctid is safe to use): joined by id, an estimate of a few hundred
-- leaseless rows made the planner hash-join against a scan of the table.
-- synchronous_commit: 'off' lets this claim's commit return before its WAL
-- record is flushed (CAIRNQ["ASYNC_CLAIM_COMMIT"], worker only), null keeps the
-- session's setting. set_config(..., true) is SET LOCAL: it lasts until the
-- transaction ends, including the implicit one of an autocommit statement, and
-- the commit_mode CTE is joined below so it is evaluated (once) whenever a row
-- is written. See docs/performance-notes.md for what a lost claim costs.
WITH commit_mode AS MATERIALIZED (
    SELECT set_config(
        'synchronous_commit',
        COALESCE(%(synchronous_commit)s::text, current_setting('synchronous_commit')),
        true
    ) AS applied
),
lapsed AS MATERIALIZED (
    SELECT ctid FROM cairnq_tasks
    WHERE status = 'running'
      AND lease_until_ms IS NOT NULL
      AND lease_until_ms <= (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint)
    FOR UPDATE SKIP LOCKED
),
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
WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM lapsed UNION ALL SELECT ctid FROM leaseless))
RETURNING t.id, t.status
