-- Switch the database file to write-ahead logging. No parameters.
-- journal_mode is stored in the file, so doing it once here spares every upstream
-- process the exclusive moment it would otherwise need at connect. Answers one
-- row holding the resulting mode.
PRAGMA journal_mode = WAL
