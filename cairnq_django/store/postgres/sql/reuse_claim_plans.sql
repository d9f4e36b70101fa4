-- Plan this session's prepared statements once instead of on every run
-- (a worker's claim connection). params: none
SET plan_cache_mode = force_generic_plan
