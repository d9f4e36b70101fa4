-- One database's cumulative counters: commits and tuples written (for cost per task).
-- Parameters: name. Backends publish these at transaction end and exit, so read
-- them after the worker has stopped.
SELECT xact_commit, tup_inserted, tup_updated, tup_deleted FROM pg_stat_database WHERE datname = %(name)s
