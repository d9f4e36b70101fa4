-- Delete triage history rows older than a cutoff (CAIRNQ["HISTORY_KEEP_MS"], docs/configuration.md).
-- params: before_ms (minute starts before it go), limit
DELETE FROM cairnq_django_error_minute
WHERE id IN (SELECT id FROM cairnq_django_error_minute WHERE minute_ms < %(before_ms)s LIMIT %(limit)s)
RETURNING id
