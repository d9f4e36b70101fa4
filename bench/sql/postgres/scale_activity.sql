-- Server connections to one database by state, the harness's own left out.
-- Parameters: name (database), harness (its application_name).
SELECT coalesce(state, 'none'), count(*)
FROM pg_stat_activity
WHERE datname = %(name)s AND backend_type = 'client backend' AND application_name <> %(harness)s
GROUP BY 1
