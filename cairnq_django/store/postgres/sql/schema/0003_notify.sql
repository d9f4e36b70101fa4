-- Step 0003_notify.sql (PostgreSQL only): wake listeners on the two protocol
-- channels from inside the database (protocol 1.9): cairnq_queued (queue), cairnq_done (task id).
-- No parameters. Leaves schema_version alone, as upstream's step does.

-- statement: the trigger function (replaced if present)
CREATE OR REPLACE FUNCTION cairnq_notify() RETURNS trigger
LANGUAGE plpgsql
AS $fn$
DECLARE
    sent text;
BEGIN
    IF NEW.status = 'queued' THEN
        IF TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'queued' THEN
            sent := pg_notify('cairnq_queued', NEW.queue);
        END IF;
    ELSIF TG_OP = 'UPDATE'
          AND NEW.status IN ('succeeded', 'failed', 'canceled')
          AND OLD.status NOT IN ('succeeded', 'failed', 'canceled') THEN
        sent := pg_notify('cairnq_done', NEW.id);
    END IF;
    -- AFTER trigger: the return value is ignored.
    RETURN NULL;
END
$fn$

-- statement: drop a previous trigger so the definition below is the one in force
DROP TRIGGER IF EXISTS cairnq_tasks_notify ON cairnq_tasks

-- statement: the trigger
CREATE TRIGGER cairnq_tasks_notify
    AFTER INSERT OR UPDATE OF status ON cairnq_tasks
    FOR EACH ROW
    WHEN (NEW.status IS DISTINCT FROM 'running')
    EXECUTE FUNCTION cairnq_notify()
