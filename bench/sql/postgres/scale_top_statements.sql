-- The statements that took the most server time in this database since pg_stat_statements was last reset.
-- Parameters: limit. Needs the pg_stat_statements extension (shared_preload_libraries).
SELECT calls, total_exec_time, mean_exec_time, max_exec_time, rows,
       shared_blks_hit + shared_blks_read AS blocks, shared_blks_read, left(query, 4000) AS query
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC
LIMIT %(limit)s
