"""Tell "the cairnq tables are missing" from any other database error.

Before ``manage.py migrate cairnq`` the first statement on the queue database
fails deep in the driver ("no such table: cairnq_tasks" on SQLite,
``UndefinedTable`` on PostgreSQL). ``schema_required`` turns exactly that
error into ``SchemaNotInstalled``, one line that says what to run; every
other error passes through untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.core.management.base import CommandError
from django.db import DatabaseError

from ..exceptions import SchemaNotInstalled

# The protocol's tables, and the app's own that the claim and the API read.
TABLES = (
    "cairnq_tasks",
    "cairnq_task_keys",
    "cairnq_meta",
    "cairnq_migrations",
    "cairnq_django_queue_pause",
    "cairnq_django_fleet_start",
    "cairnq_django_queue_minute",
)

# The app's functions (migrations 0006, 0009): missing when its migrations have not all run.
FUNCTIONS = ("cairnq_django_claim_limited", "cairnq_django_claim_concurrent")

# PostgreSQL's SQLSTATEs for a relation and a function that do not exist.
_UNDEFINED_TABLE = "42P01"
_UNDEFINED_FUNCTION = "42883"


def is_missing_table(exc: BaseException) -> bool:
    """True when ``exc`` says one of the cairnq tables does not exist."""
    if not isinstance(exc, DatabaseError):
        return False
    text = str(exc)
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    if sqlstate == _UNDEFINED_FUNCTION and any(function in text for function in FUNCTIONS):
        return True
    if not any(table in text for table in TABLES):
        return False
    # Django chains the driver's error: psycopg carries the SQLSTATE.
    if sqlstate == _UNDEFINED_TABLE:
        return True
    return "no such table" in text.lower()


@contextmanager
def schema_required(alias: str) -> Iterator[None]:
    """Raise ``SchemaNotInstalled`` for ``alias`` when the block meets missing cairnq tables."""
    try:
        yield
    except DatabaseError as exc:
        if is_missing_table(exc):
            raise SchemaNotInstalled(alias) from exc
        raise


@contextmanager
def command_schema_required(alias: str) -> Iterator[None]:
    """``schema_required`` for a management command: a ``CommandError``, so no traceback."""
    try:
        with schema_required(alias):
            yield
    except SchemaNotInstalled as exc:
        raise CommandError(str(exc)) from exc
