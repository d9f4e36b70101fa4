-- One handler call of bench.scale_record, logged from inside the handler.
-- Parameters (positional, Django cursor): task id, attempt, wall-clock start in ms.
INSERT INTO bench_scale_runs (task_id, attempt, started_ms) VALUES (%s, %s, %s)
