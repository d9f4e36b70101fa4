-- Switch the database file to write-ahead logging. No parameters.
-- journal_mode is stored in the file: done once here, upstream processes need no exclusive moment at connect.
PRAGMA journal_mode = WAL
