-- One table's live and dead tuples, updates (HOT ones too), size on disk and how often autovacuum has run on it.
-- Parameters: table. Read in autocommit: a transaction would cache the statistics.
SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, pg_total_relation_size(relid), autovacuum_count
FROM pg_stat_user_tables
WHERE relname = %(table)s
