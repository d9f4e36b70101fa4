"""The SQLite store, its statements (``sql/``) and SQLite-only machinery."""
