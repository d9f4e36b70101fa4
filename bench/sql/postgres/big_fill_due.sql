-- bench/big_table.py: n queued tasks in queue due, named bench.noop, all due (one a millisecond up to now).
-- Parameters: n, now (epoch ms). The claim probe takes them one at a time, oldest first.
INSERT INTO cairnq_tasks
    (id, name, queue, status, payload, metadata, max_attempts, priority,
     run_at_ms, root_id, created_at_ms, updated_at_ms)
SELECT d.id, 'bench.noop', 'due', 'queued', jsonb_build_object('i', d.i), '{}'::jsonb, 3, 0,
       d.at, d.id, d.at, d.at
FROM (
    SELECT i, %(now)s::bigint - %(n)s::bigint + i AS at,
           'task_' || lpad((%(now)s::bigint - %(n)s::bigint + i)::text, 14, '0') || 'D' || lpad(i::text, 11, '0') AS id
    FROM generate_series(1, %(n)s::bigint) AS i
) AS d
