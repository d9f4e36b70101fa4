"""The PostgreSQL store and its statements (``sql/``)."""
