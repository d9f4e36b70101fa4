-- bench/big_table.py --key-every: give every n-th finished task a business key, as a submit with key= would.
-- Parameters: every. The task's number is the last 12 digits of its id (big_fill_terminal.sql).
INSERT INTO cairnq_task_keys (key, task_id, created_at_ms, updated_at_ms)
SELECT 'order-' || substr(id, 20), id, created_at_ms, created_at_ms
FROM cairnq_tasks
WHERE status IN ('succeeded', 'failed', 'canceled')
  AND substr(id, 20)::bigint %% %(every)s::bigint = 0
