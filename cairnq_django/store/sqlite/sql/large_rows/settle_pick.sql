-- Large-row mode, settlement step 1 (pick), for complete_many, fail_many and snooze_many:
-- the listed tasks this worker still owns (3.12/3.13); ids missing from the answer lost their lease.
-- params: items (JSON array text of objects with an "id"), worker_id, now (process ms)
SELECT t.id
FROM json_each(%(items)s) AS item
JOIN cairnq_tasks AS t ON t.id = json_extract(item.value, '$.id')
WHERE +t.status = 'running'
  AND t.worker_id = %(worker_id)s
  AND t.lease_until_ms > %(now)s
