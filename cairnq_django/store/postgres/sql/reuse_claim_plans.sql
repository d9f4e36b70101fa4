-- Plan this session's prepared statements once instead of on every run
-- (a worker's claim connection), never as a sequential scan of cairnq_tasks
-- nor with a sort an index could spare, and never compiled. params: none
-- A plan is kept for the connection's life: one first made while the table
-- was empty (a fresh install) would scan the whole table on every claim once
-- it has grown. Only this connection's own statements run here, each meant
-- to read an index in the order it asks for: one made while the statistics
-- saw only finished rows would read cairnq_tasks_status_completed_idx and
-- sort, which under a held snapshot walks every version the table ever had.
-- A sort no index spares (next_run_at's last step) still runs, but the cost
-- the two settings add would pass jit_above_cost and compile it on every run.
-- The fleet-limited claim functions carry settings of their own (sql/functions/).
SELECT set_config('plan_cache_mode', 'force_generic_plan', false),
       set_config('enable_seqscan', 'off', false),
       set_config('enable_sort', 'off', false),
       set_config('jit', 'off', false)
