-- Is any django-tasks-db task still ready or running? No parameters.
SELECT EXISTS (SELECT 1 FROM django_tasks_database_dbtaskresult WHERE status IN ('READY', 'RUNNING'))
