-- Large-row mode, settlement step 3 (read), for complete_many, fail_many and snooze_many:
-- the status each picked task ended in (cancel wins; a retryable failure or a snooze is queued again).
-- params: picked (JSON array text of ids)
SELECT t.id, t.status
FROM json_each(%(picked)s) AS picked
JOIN cairnq_tasks AS t ON t.id = picked.value
