-- Read one task's payload by id (one a claim left in the database because it
-- was large; see claim.sql) as slices of its UTF-8 JSON text: rows of (at,
-- part), part being slice_bytes bytes starting at byte at (1-based). No row:
-- the task is gone.
-- params: id, slice_bytes
-- Why slices: the client reads them one row at a time (psycopg's stream), so
-- its buffers hold one slice. A single 50 MB value would sit in libpq's input
-- buffer, which then stays that large for the connection's life, in the
-- result and in the decoded text, all at once. OFFSET 0 keeps the subquery a
-- subquery, so the text is rendered once, not once per slice; the rows carry
-- their offset because nothing orders them without a sort.
SELECT s.at, substring(p.body FROM s.at FOR %(slice_bytes)s) AS part
FROM (
    SELECT convert_to(payload::text, 'UTF8') AS body
    FROM cairnq_tasks
    WHERE id = %(id)s
    OFFSET 0
) AS p
CROSS JOIN LATERAL generate_series(1, octet_length(p.body), %(slice_bytes)s) AS s(at)
