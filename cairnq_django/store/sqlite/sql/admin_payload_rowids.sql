-- Locate the rows of one admin changelist page so their payloads can be read
-- with incremental blob I/O, a few KB each (cairnq_django/admin_preview.py).
-- SQLite only: rowids and blob handles are its own; PostgreSQL previews in the page query.
-- params: ids (JSON array text of task ids)
-- Ids missing from the answer are rows deleted since the page was read.
-- encoding: blobs hand back TEXT in the database's encoding, UTF-8 unless an
-- upstream SDK created the file as UTF-16.
SELECT id, rowid, (SELECT encoding FROM pragma_encoding) AS encoding
FROM cairnq_tasks
WHERE id IN (SELECT value FROM json_each(%(ids)s))
