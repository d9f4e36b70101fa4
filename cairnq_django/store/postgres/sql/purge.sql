-- Delete up to limit terminal rows finished strictly before now - older_than_ms,
-- oldest first, each optional filter applied only when given (protocol 3.8).
-- params: older_than_ms, queue, status, name (each text or null), limit, from_ms (bigint or null),
--   synchronous_commit ('off' outside a caller's transaction, else null = the session's)
-- A batch a server crash undoes is deleted again by the next sweep, so its commit need not wait
-- for the disk flush, which a checkpoint's writes can hold for a tenth of a second with the
-- rows' locks still held. Joined below so it runs.
WITH commit_mode AS MATERIALIZED (
    SELECT set_config(
        'synchronous_commit',
        COALESCE(%(synchronous_commit)s::text, current_setting('synchronous_commit')),
        true
    ) AS applied
),
doomed AS MATERIALIZED (
    SELECT id FROM cairnq_tasks
    WHERE status IN ('succeeded', 'failed', 'canceled')
      AND completed_at_ms IS NOT NULL
      AND completed_at_ms < (extract(epoch from now()) * 1000)::bigint - %(older_than_ms)s::bigint
      -- Where the last batch of a sweep ended: the index range starts past the rows it deleted, whose
      -- dead entries a scan from the oldest would step over until vacuum (every bigint when null).
      AND completed_at_ms >= COALESCE(%(from_ms)s::bigint, -9223372036854775808)
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(status)s::text IS NULL OR status = %(status)s::text)
      AND (%(name)s::text IS NULL OR name = %(name)s::text)
    ORDER BY completed_at_ms
    LIMIT %(limit)s
    -- A task being retried right now is skipped, not deleted; key rows follow by ON DELETE CASCADE.
    FOR UPDATE SKIP LOCKED
)
DELETE FROM cairnq_tasks AS t
USING doomed, commit_mode
WHERE t.id = doomed.id
RETURNING t.id, t.completed_at_ms
