"""Statement and lock timeouts carried by each transaction, for a connection behind a transaction pooler.

The worker bounds its own statements with ``statement_timeout`` and
``lock_timeout`` (worker/connections.py). Connected directly it sets them once
for the session, in libpq's startup ``options``. Behind a pooler in
transaction mode the server session is whichever one the pooler hands out
(PgBouncer 1.18 drops ``options``), so each statement carries them instead:
two ``SET LOCAL`` in the same message, undone when its transaction ends.
"""

from __future__ import annotations

from typing import Any

# Set on one thread's Django connection wrapper (each thread has its own), so
# only the worker's own threads carry the bound; handler threads do not.
_ATTRIBUTE = "_cairnq_transaction_timeout_ms"
_PREFIX_STATEMENTS = 2


def bound_each_transaction(wrapper: Any, timeout_ms: int) -> None:
    """Make the store's statements on ``wrapper`` carry both timeouts of ``timeout_ms``."""
    setattr(wrapper, _ATTRIBUTE, int(timeout_ms))


def prefix(wrapper: Any) -> str:
    """The ``SET LOCAL`` pair to send before a statement on ``wrapper`` ("" when it has none)."""
    timeout_ms = getattr(wrapper, _ATTRIBUTE, None)
    if timeout_ms is None:
        return ""
    return f"SET LOCAL statement_timeout = {timeout_ms:d}; SET LOCAL lock_timeout = {timeout_ms:d};\n"


def skip_prefix(cursor: Any) -> None:
    """Move past the two ``SET`` results to the statement's own.

    psycopg 3 keeps the first result of a message current; psycopg2 the last.
    """
    # It needs a PostgreSQL driver, and worker/connections.py imports this module in SQLite workers too.
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if is_psycopg3:
        for _ in range(_PREFIX_STATEMENTS):
            cursor.nextset()


class BoundedCursor:
    """A Django cursor (client-side binding) whose ``execute`` sends the prefix with each statement."""

    def __init__(self, cursor: Any, head: str) -> None:
        self._cursor = cursor
        self._head = head

    def __enter__(self) -> BoundedCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()

    def execute(self, sql: str, params: Any = None) -> None:
        self._cursor.execute(self._head + sql, params)
        skip_prefix(self._cursor)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)
