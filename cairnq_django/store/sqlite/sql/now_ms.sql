-- The clock every SQLite write uses, read back through the database.
-- params: now (process ms): SQLite's writer supplies "now" (protocol 2.1); this echoes it so
-- both dialects answer now_ms() with a statement of the same name.
SELECT %(now)s AS now_ms
