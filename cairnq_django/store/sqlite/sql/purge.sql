-- Delete up to limit terminal rows finished strictly before now - older_than_ms,
-- oldest first, each optional filter applied only when given (protocol 3.8).
-- params: older_than_ms, queue, status, name (each text or null), limit, from_ms (or null), now (process ms)
DELETE FROM cairnq_tasks
WHERE id IN (
    SELECT id FROM cairnq_tasks
    -- Spelled out so the completion indexes (one partial on this list) apply; keys follow by CASCADE.
    WHERE status IN ('succeeded', 'failed', 'canceled')
      AND completed_at_ms IS NOT NULL
      AND completed_at_ms < %(now)s - %(older_than_ms)s
      -- Where the last batch of a sweep ended (every integer when null), as on PostgreSQL.
      AND completed_at_ms >= COALESCE(%(from_ms)s, -9223372036854775808)
      AND (%(queue)s IS NULL OR queue = %(queue)s)
      AND (%(status)s IS NULL OR status = %(status)s)
      AND (%(name)s IS NULL OR name = %(name)s)
    ORDER BY completed_at_ms
    LIMIT %(limit)s
)
RETURNING id, completed_at_ms
