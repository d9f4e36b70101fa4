-- Read one task's payload by id (one a claim left in the database because it
-- was large; see claim.sql). No row: the task is gone.
-- params: id
SELECT payload FROM cairnq_tasks WHERE id = %(id)s
