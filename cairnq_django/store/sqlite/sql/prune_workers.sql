-- Delete registry rows of workers not seen for keep_ms: stopped, or lost and never back.
-- params: keep_ms, now (process ms)
DELETE FROM cairnq_django_worker
WHERE last_seen_at_ms < %(now)s - %(keep_ms)s
RETURNING id
