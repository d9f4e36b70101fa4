-- Delete logged fleet starts that can no longer count (docs/limits.md): the call is no longer running
-- and the start is older than its scope's longest rate window.
-- params: keep (JSON object: scope -> ms to keep), default_keep_ms, limit, now (process ms)
DELETE FROM cairnq_django_fleet_start
WHERE id IN (
    SELECT s.id
    FROM cairnq_django_fleet_start AS s
    LEFT JOIN json_each(%(keep)s) AS k ON k.key = s.scope
    WHERE s.started_at_ms < %(now)s - coalesce(k.value, %(default_keep_ms)s)
      AND NOT EXISTS (
          SELECT 1 FROM cairnq_tasks AS t
          WHERE t.id = s.task_id AND t.status = 'running' AND t.attempt = s.attempt AND t.worker_id = s.worker_id
      )
    LIMIT %(limit)s
)
RETURNING id
