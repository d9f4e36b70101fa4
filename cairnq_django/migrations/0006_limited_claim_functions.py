"""Create the fleet-limited claim functions (PostgreSQL only; docs/limits.md).

The two claims of a fleet-limited name run as PL/pgSQL functions, so the
server keeps their plans for the session and the scopes' locks and the
claim cost one round trip (store/postgres/sql/functions/). They belong to
the app, like its ``cairnq_django_*`` tables: the protocol's tables and
the other SDKs never see them. A later change to a claim ships a new
migration that runs ``CREATE OR REPLACE FUNCTION`` again.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from cairnq_django.store.schema import dialect_of
from cairnq_django.store.sql_files import load

FUNCTIONS = ("claim_limited", "claim_limited_keyed")


def create_functions(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if dialect_of(schema_editor.connection) != "postgres":
        return  # SQLite claims a limited name with plain statements under its write lock
    with schema_editor.connection.cursor() as cursor:
        for name in FUNCTIONS:
            cursor.execute(load("postgres", f"functions/{name}"))


def drop_functions(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if dialect_of(schema_editor.connection) != "postgres":
        return
    with schema_editor.connection.cursor() as cursor:
        for name in FUNCTIONS:
            cursor.execute(f"DROP FUNCTION IF EXISTS cairnq_django_{name}")


class Migration(migrations.Migration):
    dependencies = [
        ("cairnq", "0005_worker_registry"),
    ]

    operations = [
        migrations.RunPython(create_functions, drop_functions),
    ]
