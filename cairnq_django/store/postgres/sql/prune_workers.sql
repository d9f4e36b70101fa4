-- Delete registry rows of workers not seen for keep_ms: stopped, or lost and never back.
-- params: keep_ms
DELETE FROM cairnq_django_worker
WHERE last_seen_at_ms < (extract(epoch from clock_timestamp()) * 1000)::bigint - %(keep_ms)s::bigint
RETURNING id
