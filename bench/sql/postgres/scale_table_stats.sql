-- One table's live and dead tuples, updates (HOT ones too) and size on disk.
-- Parameters: table. Read in autocommit: a transaction would cache the statistics.
SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, pg_total_relation_size(relid)
FROM pg_stat_user_tables
WHERE relname = %(table)s
