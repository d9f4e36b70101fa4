-- The planner's row estimate for a table (the admin's count on a huge changelist).
-- params: table (the table's name, as the connection's search_path finds it)
-- reltuples is what the last ANALYZE or VACUUM saw: free to read, never exact,
-- and -1 (or NULL for an unknown table) before the table was ever analyzed.
SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%(table)s)
