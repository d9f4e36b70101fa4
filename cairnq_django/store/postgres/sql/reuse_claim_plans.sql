-- Plan this session's prepared statements once instead of on every run
-- (a worker's claim connection), and never as a sequential scan of cairnq_tasks. params: none
-- A plan is kept for the connection's life: one first made while the table
-- was empty (a fresh install) would scan the whole table on every claim once
-- it has grown. Only this connection's own statements run here, each meant
-- to read an index; the fleet-limited claim functions set the same.
SELECT set_config('plan_cache_mode', 'force_generic_plan', false),
       set_config('enable_seqscan', 'off', false)
