-- Draw up to limit claimable tasks in claim order and lease them to worker_id
-- (protocol 3.9 step 2b, 4.3): status running, lease now + lease_ms, attempt + 1.
-- Rendered from claim.template.sql (store/sql_templates.py): claim, claim_one_name (several queues),
-- claim_one_queue, claim_one_queue_one_name (one queue).
-- params: queues (text[]), from_priorities (int[]), from_run_ats (bigint[]), from_ids (text[]) for several queues,
-- or queue, from_priority, from_run_at_ms, from_id for one (claim_cursor.py); names (text[] or null = any name)
-- or name; worker_id, lease_ms, limit, synchronous_commit (text or null)

-- SET LOCAL of synchronous_commit ('off' = ASYNC_CLAIM_COMMIT, null = the session's); joined below so it runs.
WITH commit_mode AS MATERIALIZED (
    SELECT set_config(
        'synchronous_commit',
        COALESCE(%(synchronous_commit)s::text, current_setting('synchronous_commit')),
        true
    ) AS applied
),
-- The clock read once: a scalar subquery bounds each index range.
clock AS MATERIALIZED (
    SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now_ms
),
-- Materialized: run once, or a re-scan would skip rows this statement just leased and take more than limit.
picked AS MATERIALIZED (
-- [many_queues]
    SELECT head.ctid
    FROM unnest(%(queues)s::text[], %(from_priorities)s::int[], %(from_run_ats)s::bigint[], %(from_ids)s::text[])
        AS wanted(queue, from_priority, from_run_at_ms, from_id)
    -- Each queue's head on its own; "queue = ANY" would sort the backlog.
    CROSS JOIN LATERAL (
-- [/many_queues]
        -- Three index ranges in claim order (cairnq_tasks_claim_idx; cairnq_tasks_claim_name_idx for one name),
        -- from where this process's last claim of the queue ended (claim_cursor.py): priorities above the
        -- cursor's, its priority from the (run_at_ms, id) floor on, those below.
        -- A paused queue (docs/limits.md) is a test of the queue, not of each row.
        -- One name: "name BETWEEN" repeats the equality for the planner (the note the claim functions cite as
        -- claim_one_queue_one_name.sql's). A worker's prepared plan, made without the name's value, counts
        -- "name = $n" as 1/(distinct names), every row when the table holds one name, and would read
        -- cairnq_tasks_claim_idx filtering out another name's whole backlog. A range of unknown bounds counts as
        -- a small share, so the plan reads cairnq_tasks_claim_name_idx whatever the statistics.
        SELECT * FROM (
            SELECT {columns} FROM cairnq_tasks
            WHERE queue = {queue} AND status = 'queued'
              AND {queue} <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
              AND {name_test}
              AND priority > {from_priority}
              AND run_at_ms <= (SELECT now_ms FROM clock)
            ORDER BY priority DESC, run_at_ms, id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS above
        UNION ALL
        SELECT * FROM (
            SELECT {columns} FROM cairnq_tasks
            WHERE queue = {queue} AND status = 'queued'
              AND {queue} <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
              AND {name_test}
              AND priority = {from_priority} AND (run_at_ms, id) >= {from_floor}
              AND run_at_ms <= (SELECT now_ms FROM clock)
            ORDER BY priority DESC, run_at_ms, id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS cursor
        UNION ALL
        SELECT * FROM (
            SELECT {columns} FROM cairnq_tasks
            WHERE queue = {queue} AND status = 'queued'
              AND {queue} <> ALL(ARRAY(SELECT queue FROM cairnq_django_queue_pause))
              AND {name_test}
              AND priority < {from_priority}
              AND run_at_ms <= (SELECT now_ms FROM clock)
            ORDER BY priority DESC, run_at_ms, id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS below
        LIMIT %(limit)s
-- [many_queues]
    ) AS head
    ORDER BY head.priority DESC, head.run_at_ms, head.id
    LIMIT %(limit)s
-- [/many_queues]
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
