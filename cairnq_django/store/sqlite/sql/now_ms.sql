-- The clock every SQLite write uses, read back through the database.
-- params: now (process ms)
-- SQLite is embedded: the writing process supplies "now" (protocol 2.1), so this
-- only echoes the process clock; it exists so both dialects answer now_ms() with
-- a statement of the same name.
SELECT %(now)s AS now_ms
