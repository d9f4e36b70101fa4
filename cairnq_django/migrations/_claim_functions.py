"""Create and drop the app's PostgreSQL claim functions, for the migrations that ship them.

Each function's text is ``store/postgres/sql/functions/<name>.sql`` as it is
now: a migration that changes a function runs ``CREATE OR REPLACE`` again
through ``replace``. SQLite has no functions; there these do nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from cairnq_django.store.schema import dialect_of
from cairnq_django.store.sql_files import load

RunPythonCode = Callable[[Any, BaseDatabaseSchemaEditor], None]


def replace(names: Sequence[str]) -> RunPythonCode:
    """A RunPython step that (re)creates the named functions on PostgreSQL."""

    def create(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
        if dialect_of(schema_editor.connection) != "postgres":
            return  # SQLite claims a limited name with plain statements under its write lock
        with schema_editor.connection.cursor() as cursor:
            for name in names:
                cursor.execute(load("postgres", f"functions/{name}"))

    return create


def drop(names: Sequence[str]) -> RunPythonCode:
    """A RunPython step that drops the named functions on PostgreSQL."""

    def remove(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
        if dialect_of(schema_editor.connection) != "postgres":
            return
        with schema_editor.connection.cursor() as cursor:
            for name in names:
                cursor.execute(f"DROP FUNCTION IF EXISTS cairnq_django_{name}")

    return remove
