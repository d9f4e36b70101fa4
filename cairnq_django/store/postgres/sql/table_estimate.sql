-- The planner's row estimate for a table (the admin's count on a huge changelist).
-- params: table (the table's name, as the connection's search_path finds it)

-- reltuples: free to read, never exact; -1 (or NULL) before the first ANALYZE.
SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%(table)s)
