-- Parameters: name (upstream step file name, e.g. '0001_init.sql').
-- A row means the step was applied by anybody (this app or an upstream SDK).
SELECT 1 FROM cairnq_migrations WHERE name = %(name)s
