"""Declare the cairnq models and install the shared cairnq v1 tables.

Non-atomic on purpose: ``cairnq_django.store.schema.install`` commits the ledger
table first and then each upstream step in its own short transaction with the
ledger locked, as the upstream SDKs do, so a concurrent installer (another
``migrate`` or an upstream SDK connecting) waits per step instead of for the
whole install. The models are unmanaged: Django's schema editor never creates,
alters or drops these tables, and unapplying this migration keeps them and
their rows (other SDKs share them).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from cairnq_django.store.schema import install

def install_schema(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    install(schema_editor.connection)


class Migration(migrations.Migration):
    initial = True
    atomic = False

    dependencies = []  # type: ignore[var-annotated]

    operations = [
        migrations.CreateModel(
            name="MigrationLedger",
            fields=[
                ("name", models.TextField(primary_key=True, serialize=False)),
                ("applied_at_ms", models.BigIntegerField()),
            ],
            options={
                "verbose_name": "schema ledger entry",
                "db_table": "cairnq_migrations",
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="ProtocolMeta",
            fields=[
                ("key", models.TextField(primary_key=True, serialize=False)),
                ("value", models.TextField()),
            ],
            options={
                "verbose_name": "protocol metadata",
                "db_table": "cairnq_meta",
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Task",
            fields=[
                ("id", models.TextField(primary_key=True, serialize=False)),
                ("name", models.TextField(verbose_name="name")),
                ("queue", models.TextField(db_default="default", verbose_name="queue")),
                (
                    "status",
                    models.TextField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed"),
                            ("canceled", "Canceled"),
                        ],
                        verbose_name="status",
                    ),
                ),
                ("payload", models.JSONField(verbose_name="payload")),
                ("result", models.JSONField(null=True, verbose_name="result")),
                ("error", models.JSONField(null=True, verbose_name="error")),
                ("metadata", models.JSONField(db_default={}, verbose_name="metadata")),
                ("progress", models.FloatField(null=True, verbose_name="progress")),
                ("message", models.TextField(null=True, verbose_name="message")),
                ("attempt", models.IntegerField(db_default=0, verbose_name="attempt")),
                ("max_attempts", models.IntegerField(db_default=3, verbose_name="max attempts")),
                ("priority", models.IntegerField(db_default=0, verbose_name="priority")),
                ("worker_id", models.TextField(null=True, verbose_name="worker")),
                ("lease_until_ms", models.BigIntegerField(null=True, verbose_name="lease until (ms)")),
                ("run_at_ms", models.BigIntegerField(verbose_name="run at (ms)")),
                (
                    "cancel_requested_at_ms",
                    models.BigIntegerField(null=True, verbose_name="cancel requested at (ms)"),
                ),
                ("parent_id", models.TextField(null=True, verbose_name="parent")),
                ("root_id", models.TextField(null=True, verbose_name="root")),
                ("correlation_id", models.TextField(null=True, verbose_name="correlation id")),
                ("created_at_ms", models.BigIntegerField(verbose_name="created at (ms)")),
                ("updated_at_ms", models.BigIntegerField(verbose_name="updated at (ms)")),
                ("completed_at_ms", models.BigIntegerField(null=True, verbose_name="completed at (ms)")),
            ],
            options={
                "verbose_name": "task",
                "verbose_name_plural": "tasks",
                "db_table": "cairnq_tasks",
                "permissions": [("cancel_task", "Can cancel tasks"), ("retry_task", "Can retry tasks")],
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="TaskKey",
            fields=[
                ("key", models.TextField(primary_key=True, serialize=False)),
                # Declared so the migration state knows the relation; the
                # database-level cascading constraint comes from the DDL.
                (
                    "task",
                    models.ForeignKey(
                        db_column="task_id",
                        db_constraint=False,
                        db_index=False,
                        on_delete=models.DO_NOTHING,
                        to="cairnq.task",
                    ),
                ),
                ("created_at_ms", models.BigIntegerField()),
                ("updated_at_ms", models.BigIntegerField()),
            ],
            options={
                "verbose_name": "task key",
                "db_table": "cairnq_task_keys",
                "managed": False,
            },
        ),
        migrations.RunPython(install_schema, reverse_code=migrations.RunPython.noop, elidable=False),
    ]
