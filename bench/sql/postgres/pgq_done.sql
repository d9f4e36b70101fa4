-- Count jobs pgqueuer logged as successful. No parameters.
SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'
