-- Is any procrastinate job still waiting or running? No parameters.
SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing'))
