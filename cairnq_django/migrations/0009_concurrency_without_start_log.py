"""Claim functions for names limited by global_concurrency alone (PostgreSQL only; docs/limits.md).

A name with no rate limit, no global resource and no batch counts its live
calls from its tasks running under an unexpired lease, so its claim writes
nothing to ``cairnq_django_fleet_start``. These are new functions beside
0006's, which still serve every other limited name; reversing drops them.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from cairnq_django.store.schema import dialect_of
from cairnq_django.store.sql_files import load

FUNCTIONS = ("claim_concurrent", "claim_concurrent_keyed")


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
        ("cairnq", "0008_triage"),
    ]

    operations = [
        migrations.RunPython(create_functions, drop_functions),
    ]
