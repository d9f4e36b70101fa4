-- Sessions idle inside a transaction that holds back xmin (the held-xmin run's pin).
-- No parameters.
SELECT count(*) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND state = 'idle in transaction'
