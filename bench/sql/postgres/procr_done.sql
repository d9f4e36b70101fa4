-- Count procrastinate jobs that succeeded. No parameters.
SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'
