-- The scale-out bench's run log: one row per handler call of bench.scale_record.
-- No parameters. Not a migration: only the bench's own database has it.
CREATE TABLE IF NOT EXISTS bench_scale_runs (
    task_id text NOT NULL,
    attempt int NOT NULL,
    started_ms bigint NOT NULL
)
