-- Handler calls, distinct tasks called, and calls past a first attempt.
-- No parameters. calls - distinct = tasks run twice.
SELECT count(*), count(DISTINCT task_id), count(*) FILTER (WHERE attempt <> 1) FROM bench_scale_runs
