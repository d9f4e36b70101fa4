-- Empty pgqueuer's queue, log and statistics tables before a measurement. No parameters.
TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics
