-- Count django-tasks-db tasks that finished successfully. No parameters.
SELECT count(*) FROM django_tasks_database_dbtaskresult WHERE status = 'SUCCESSFUL'
