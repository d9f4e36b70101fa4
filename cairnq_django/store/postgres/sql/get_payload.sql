-- Read one task's payload by id (one a claim left in the database because it
-- was large; see claim.sql, protocol 4.6) as rows (at, part) of slice_bytes of its UTF-8 JSON text.
-- params: id, slice_bytes
SELECT s.at, substring(p.body FROM s.at FOR %(slice_bytes)s) AS part
FROM (
    SELECT convert_to(payload::text, 'UTF8') AS body
    FROM cairnq_tasks
    WHERE id = %(id)s
    -- Keeps the subquery a subquery: the text is rendered once, not once per slice.
    OFFSET 0
) AS p
CROSS JOIN LATERAL generate_series(1, octet_length(p.body), %(slice_bytes)s) AS s(at)
