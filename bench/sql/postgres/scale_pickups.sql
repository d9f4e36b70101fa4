-- Each logged call's pickup: handler start minus the task's creation, in ms.
-- No parameters. Both clocks are wall-clock milliseconds on the same host.
SELECT r.started_ms - t.created_at_ms FROM bench_scale_runs r JOIN cairnq_tasks t ON t.id = r.task_id
