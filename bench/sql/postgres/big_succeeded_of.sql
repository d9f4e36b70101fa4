-- bench/big_table.py: how many of a drain's tasks succeeded (by primary key).
-- Parameters: ids (text[]).
SELECT count(*) FROM cairnq_tasks WHERE id = ANY(%(ids)s::text[]) AND status = 'succeeded'
