-- Flush every dirty buffer and restart the checkpoint schedule, so no
-- checkpoint (timed, or forced by max_wal_size) starts inside the measurement
-- that follows: one would make each page's next change log a whole page
-- image and slow whichever system happened to be running.
-- Needs superuser or pg_checkpoint; the harness carries on without it.
CHECKPOINT
