-- bench/big_table.py: the server settings a run's figures depend on, recorded with them.
-- No parameters.
SELECT name, setting, unit FROM pg_settings
WHERE name IN ('shared_buffers', 'work_mem', 'autovacuum', 'synchronous_commit', 'max_wal_size',
               'server_version', 'random_page_cost', 'effective_cache_size')
ORDER BY name
