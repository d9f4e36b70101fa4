-- Empty procrastinate's jobs (and, through the cascade, their events) before a measurement.
-- No parameters.
TRUNCATE procrastinate_jobs CASCADE
