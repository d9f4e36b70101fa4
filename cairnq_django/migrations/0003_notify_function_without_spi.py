"""Re-create ``cairnq_notify()`` with the body step 0003 now ships (PostgreSQL only).

The schema ledger records step 0003 once, so a database installed earlier
keeps the function it got then. The new body sends each notification with a
PL/pgSQL assignment instead of PERFORM (see store/postgres/sql/schema/0003_notify.sql):
the same notifications for the same rows, cheaper per inserted row.
``CREATE OR REPLACE FUNCTION`` locks no table, so workers and other SDKs on
the database carry on; the trigger itself is left as it is.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from cairnq_django.store.schema import dialect_of, notify_function

def replace_notify_function(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if dialect_of(schema_editor.connection) != "postgres":
        return  # SQLite has no NOTIFY; its workers poll
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(notify_function())


class Migration(migrations.Migration):
    dependencies = [
        ("cairnq", "0002_queue_dashboard_entry"),
    ]

    operations = [
        # Unapplying keeps the new body: it behaves exactly as the old one.
        migrations.RunPython(replace_notify_function, migrations.RunPython.noop, elidable=True),
    ]
