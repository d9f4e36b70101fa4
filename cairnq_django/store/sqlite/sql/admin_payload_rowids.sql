-- Locate the rows of one admin changelist page so their payloads can be read
-- with incremental blob I/O, a few KB each (admin/preview.py). SQLite only.
-- params: ids (JSON array text of task ids); missing ids were deleted since the page was read.

-- encoding: blobs hand back TEXT in the database's encoding (UTF-16 if an upstream SDK made it so).
SELECT id, rowid, (SELECT encoding FROM pragma_encoding) AS encoding
FROM cairnq_tasks
WHERE id IN (SELECT value FROM json_each(%(ids)s))
