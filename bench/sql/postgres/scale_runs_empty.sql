-- Empty the run log before a run. No parameters.
TRUNCATE bench_scale_runs
