-- Fleet-limited claim, last step: log the start of each call just leased, once per scope (docs/limits.md).
-- params: starts (JSON array of {scope, limit_key, task_id, attempt}), worker_id, now (process ms)
INSERT INTO cairnq_django_fleet_start (scope, limit_key, task_id, attempt, worker_id, started_at_ms)
SELECT json_extract(value, '$.scope'), json_extract(value, '$.limit_key'), json_extract(value, '$.task_id'),
       json_extract(value, '$.attempt'), %(worker_id)s, %(now)s
FROM json_each(%(starts)s)
