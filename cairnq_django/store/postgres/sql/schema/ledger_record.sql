-- Parameters: name (upstream step file name).
-- applied_at_ms comes from the database clock (transaction start), as every
-- PostgreSQL timestamp of the protocol does: epoch seconds * 1000, as bigint.
INSERT INTO cairnq_migrations (name, applied_at_ms)
VALUES (%(name)s, (extract(epoch FROM now()) * 1000)::bigint)
