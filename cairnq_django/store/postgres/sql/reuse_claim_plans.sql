-- Plan this session's prepared statements once instead of on every run
-- (a worker's claim connection). params: none
-- A claim planned afresh spends about 110 µs of a one-task claim's 270 µs in
-- the planner, and PostgreSQL goes on planning it afresh: the plan it would
-- keep, made without the LIMIT's value, looks dearer to it than the fresh
-- ones. Statements that must see their values (the probe, lease recovery,
-- batch settlement) are never prepared, so this does not reach them.
SET plan_cache_mode = force_generic_plan
