-- Parameters: name (upstream step file name), now_ms (this process's clock,
-- epoch milliseconds: on SQLite the writing process supplies time).
INSERT INTO cairnq_migrations (name, applied_at_ms) VALUES (%(name)s, %(now_ms)s)
