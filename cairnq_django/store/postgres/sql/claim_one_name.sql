-- Draw up to limit claimable tasks in claim order and lease them to worker_id
-- (protocol 3.9 step 2b, 4.3): status running, lease now + lease_ms, attempt + 1. Several queues, one name.
-- params: queues (text[]), name, worker_id, lease_ms, limit, synchronous_commit (text or null)

-- SET LOCAL of synchronous_commit ('off' = ASYNC_CLAIM_COMMIT, null = the session's); joined below so it runs.
WITH commit_mode AS MATERIALIZED (
    SELECT set_config(
        'synchronous_commit',
        COALESCE(%(synchronous_commit)s::text, current_setting('synchronous_commit')),
        true
    ) AS applied
),
-- Materialized: run once, or a re-scan would skip rows this statement just leased and take more than limit.
picked AS MATERIALIZED (
    SELECT head.ctid
    FROM unnest(%(queues)s::text[]) AS wanted(queue)
    -- Each queue's head on its own, in cairnq_tasks_claim_name_idx order; "queue = ANY" would sort the backlog.
    CROSS JOIN LATERAL (
        SELECT ctid, id, priority, run_at_ms FROM cairnq_tasks
        WHERE queue = wanted.queue
          -- Not a paused queue (docs/limits.md): a test of the queue, not of each row.
          AND wanted.queue <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
          AND status = 'queued'
          AND name = %(name)s
          -- A scalar subquery: evaluated once, so it bounds the index range.
          AND run_at_ms <= (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint)
        ORDER BY priority DESC, run_at_ms, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS head
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT %(limit)s
)
UPDATE cairnq_tasks AS t
SET status = 'running',
    worker_id = %(worker_id)s,
    lease_until_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint + %(lease_ms)s::bigint,
    attempt = t.attempt + 1,
    updated_at_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint
FROM commit_mode
-- By ctid: a TID scan to the rows just locked, whatever the statistics say.
WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM picked))
-- A payload over 256 KiB (8 KiB compressed) stays behind; the worker fetches it (get_payload.sql).
RETURNING t.id, t.name, t.queue, t.status,
    CASE WHEN pg_column_size(t.payload)
              <= CASE WHEN pg_column_compression(t.payload) IS NULL THEN 262144 ELSE 8192 END
         THEN t.payload END AS payload,
    CASE WHEN pg_column_size(t.payload)
              > CASE WHEN pg_column_compression(t.payload) IS NULL THEN 262144 ELSE 8192 END
         THEN octet_length(t.payload::text) END AS payload_bytes,
    t.result, t.error, t.metadata, t.progress, t.message, t.attempt,
    t.max_attempts, t.priority, t.worker_id, t.lease_until_ms, t.run_at_ms, t.cancel_requested_at_ms,
    t.parent_id, t.root_id, t.correlation_id, t.created_at_ms, t.updated_at_ms, t.completed_at_ms
