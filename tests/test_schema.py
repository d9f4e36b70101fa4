"""Pin the schema the Django migration installs to the one cairnq==0.15.1 builds.

Fails when ``migrate`` leaves the shared tables different from the upstream
SDK's own installation in any catalog detail (a column type, a NOT NULL, a DB
default such as ``attempt``'s, a CHECK, the cascading foreign key, an index
name, column, order or predicate, an extra index, the NOTIFY trigger), when the
ledger or meta rows are not what an upstream SDK needs to skip every step, or
when an upstream SDK connecting afterwards writes a ledger row or changes a
thing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from _schema_support import (
    catalog,
    current_dialect,
    django_database_url,
    ledger,
    meta,
    raw_connection,
    snapshot,
    upstream,
    upstream_reference,
)
from django.db import IntegrityError, connection, transaction

from cairnq_django.store import schema
from cairnq_django.models import MigrationLedger, ProtocolMeta, Task, TaskKey
from cairnq_django.store.sql_files import statement_names

NINE_INDEXES = {
    "cairnq_tasks_claim_idx",
    "cairnq_tasks_claim_name_idx",
    "cairnq_tasks_name_idx",
    "cairnq_tasks_root_idx",
    "cairnq_tasks_correlation_idx",
    "cairnq_tasks_completed_idx",
    "cairnq_tasks_lease_idx",
    "cairnq_tasks_status_completed_idx",
    "cairnq_tasks_queue_completed_idx",
}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    """A scratch database installed by the upstream SDK alone, and its snapshot."""
    with upstream_reference(tmp_path_factory.mktemp("reference")) as built:
        yield built


@pytest.fixture
def migrated_url(cairnq_db: Any) -> str:
    """The test database pytest-django built by running ``migrate``."""
    return django_database_url()


def test_catalog_equals_upstream_installation(
    migrated_url: str, reference: tuple[str, dict[str, Any]]
) -> None:
    ours = catalog(migrated_url)
    theirs = reference[1]["catalog"]
    assert ours.keys() == theirs.keys()
    for part in theirs:
        assert ours[part] == theirs[part], part


def test_exactly_the_protocol_indexes(migrated_url: str) -> None:
    # Named independently of the upstream dump, so a shared mistake would show.
    with raw_connection(migrated_url) as conn:
        if current_dialect() == "sqlite":
            rows = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' "
                "AND substr(tbl_name, 1, 7) = 'cairnq_' AND substr(tbl_name, 1, 14) <> 'cairnq_django_' AND sql IS NOT NULL"
            ).fetchall()
        else:
            rows = conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                "AND left(tablename, 7) = 'cairnq_' AND left(tablename, 14) <> 'cairnq_django_' AND right(indexname, 5) <> '_pkey'"
            ).fetchall()
    assert {r[0] for r in rows} == NINE_INDEXES


def test_ledger_and_meta_rows(migrated_url: str) -> None:
    rows = ledger(migrated_url)
    names = [name for name, _ in rows]
    expected = sorted(schema.STEPS[current_dialect()])
    assert names == expected
    assert len(names) == (9 if current_dialect() == "sqlite" else 10)
    now_ms = time.time() * 1000
    # Written at test-database creation, from either clock: recent, epoch ms.
    assert all(now_ms - 3_600_000 < applied < now_ms + 60_000 for _, applied in rows)
    assert meta(migrated_url) == {"protocol_version": "1", "schema_version": "10"}


def test_orm_models_read_the_installed_rows(cairnq_db: Any) -> None:
    assert ProtocolMeta.objects.get(key="protocol_version").value == "1"
    assert MigrationLedger.objects.filter(name="0001_init.sql").exists()
    # Every model column exists, in the table's own column order.
    for model in (Task, TaskKey, ProtocolMeta, MigrationLedger):
        with connection.cursor() as cursor:
            described = connection.introspection.get_table_description(cursor, model._meta.db_table)
        assert [f.column for f in model._meta.concrete_fields] == [c.name for c in described]


def test_database_defaults_checks_and_cascade(cairnq_db: Any) -> None:
    # The upstream insert omits attempt/max_attempts/priority/queue/metadata.
    now = int(time.time() * 1000)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO cairnq_tasks (id, name, status, payload, run_at_ms, created_at_ms, updated_at_ms)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            ["task_defaults", "n", "queued", "{}", now, now, now],
        )
        cursor.execute(
            "INSERT INTO cairnq_task_keys (key, task_id, created_at_ms, updated_at_ms) VALUES (%s, %s, %s, %s)",
            ["k1", "task_defaults", now, now],
        )
    task = Task.objects.get(id="task_defaults")
    assert (task.queue, task.attempt, task.max_attempts, task.priority, task.metadata) == (
        "default",
        0,
        3,
        0,
        {},
    )
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE cairnq_tasks SET status = %s WHERE id = %s", ["cancelled", "task_defaults"])
    if current_dialect() == "sqlite":
        with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("UPDATE cairnq_tasks SET payload = %s WHERE id = %s", ["{not json", "task_defaults"])
    # Plain SQL delete, as upstream purge does: the database removes the key row.
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM cairnq_tasks WHERE id = %s", ["task_defaults"])
    assert not TaskKey.objects.filter(key="k1").exists()


def test_installing_again_applies_nothing(migrated_url: str) -> None:
    before = snapshot(migrated_url)
    assert schema.install(connection) == []
    assert schema.pending_steps(connection) == []
    assert snapshot(migrated_url) == before


def test_install_refuses_to_run_inside_a_transaction(cairnq_db: Any) -> None:
    with transaction.atomic(), pytest.raises(transaction.TransactionManagementError):
        schema.install(connection)


def test_upstream_connect_after_migrate_writes_nothing(migrated_url: str) -> None:
    before = snapshot(migrated_url)
    # A submit proves the installation usable (it relies on attempt's default).
    [task_id] = upstream(migrated_url, [{"op": "submit", "name": "probe", "payload": {"a": 1}}])
    after = snapshot(migrated_url)
    assert after == before
    assert Task.objects.get(id=task_id).attempt == 0


@pytest.mark.skipif(current_dialect() != "postgres", reason="NOTIFY is PostgreSQL only")
def test_notify_sequence_matches_upstream(
    migrated_url: str, reference: tuple[str, dict[str, Any]]
) -> None:
    expected = [
        ("cairnq_queued", "qA"),
        ("cairnq_queued", "qA"),
        ("cairnq_done", "task_nA"),
        ("cairnq_queued", "qB"),
        ("cairnq_done", "task_nB"),
        ("cairnq_queued", "qB"),
    ]
    assert notify_sequence(migrated_url) == expected
    assert notify_sequence(reference[0]) == expected


@pytest.mark.skipif(current_dialect() != "postgres", reason="NOTIFY is PostgreSQL only")
def test_migration_0003_gives_an_earlier_install_the_shipped_notify_function(
    migrated_url: str, reference: tuple[str, dict[str, Any]]
) -> None:
    # A database installed before the function sent with assignments (or by
    # the upstream SDK) keeps its body: the ledger has step 0003 already.
    # Migration 0003 replaces it; notifications stay exactly the same.
    import importlib
    from types import SimpleNamespace

    import psycopg

    migration = importlib.import_module("cairnq_django.migrations.0003_notify_function_without_spi")
    upstream_url = reference[0]
    body = "SELECT pg_get_functiondef('cairnq_notify'::regproc)"
    with psycopg.connect(upstream_url, autocommit=True) as conn:
        theirs = conn.execute(body).fetchone()[0]
        assert "perform pg_notify" in theirs.lower()
        editor = SimpleNamespace(connection=SimpleNamespace(vendor="postgresql", cursor=conn.cursor))
        try:
            migration.replace_notify_function(None, editor)
            replaced = conn.execute(body).fetchone()[0]
            assert "perform" not in replaced.lower() and "sent := pg_notify" in replaced
            assert notify_sequence(upstream_url) == notify_sequence(migrated_url)
        finally:
            conn.execute(theirs)  # the module's reference database stays upstream's own


def notify_sequence(url: str) -> list[tuple[str, str]]:
    """Drive one task life cycle with plain SQL and collect the notifications."""
    import psycopg

    insert = (
        "INSERT INTO cairnq_tasks (id, name, queue, status, payload, run_at_ms, created_at_ms, updated_at_ms)"
        " VALUES (%s, 'n', %s, %s, '{}', 0, 0, 0)"
    )
    update = "UPDATE cairnq_tasks SET status = %s WHERE id = %s"
    with psycopg.connect(url, autocommit=True) as listener, psycopg.connect(url, autocommit=True) as writer:
        listener.execute("LISTEN cairnq_queued")
        listener.execute("LISTEN cairnq_done")
        writer.execute(insert, ["task_nA", "qA", "queued"])  # queued(qA)
        writer.execute(update, ["running", "task_nA"])  # claim: silent
        writer.execute("UPDATE cairnq_tasks SET progress = 0.5 WHERE id = 'task_nA'")  # silent
        writer.execute(update, ["queued", "task_nA"])  # retryable fail: queued(qA)
        writer.execute(update, ["queued", "task_nA"])  # queued over queued: silent
        writer.execute(update, ["running", "task_nA"])
        writer.execute(update, ["succeeded", "task_nA"])  # done(A)
        writer.execute(update, ["failed", "task_nA"])  # terminal over terminal: silent
        writer.execute(insert, ["task_nB", "qB", "queued"])  # queued(qB)
        writer.execute(update, ["canceled", "task_nB"])  # done(B)
        writer.execute(update, ["queued", "task_nB"])  # retry: queued(qB)
        writer.execute(insert, ["task_nC", "qC", "succeeded"])  # terminal insert: silent
        writer.execute(insert, ["task_nD", "qD", "running"])  # running insert: silent
        got = [(n.channel, n.payload) for n in listener.notifies(timeout=1.0)]
        writer.execute("DELETE FROM cairnq_tasks WHERE id IN ('task_nA', 'task_nB', 'task_nC', 'task_nD')")
    return got


def test_step_files_match_the_step_list() -> None:
    ledger_files = {"ledger_create", "ledger_lock", "ledger_has", "ledger_record"}
    for dialect, steps in schema.STEPS.items():
        extra = {"journal_wal"} if dialect == "sqlite" else set()
        shipped = statement_names(dialect, "schema")
        assert shipped == {s.removesuffix(".sql") for s in steps} | ledger_files | extra
        for step in steps:
            statements = schema.step_statements(dialect, step)
            assert statements and all(s.strip() and schema.STATEMENT_MARKER not in s for s in statements)
    # The dialects agree on every step but PostgreSQL's NOTIFY trigger.
    assert set(schema.STEPS["postgres"]) - set(schema.STEPS["sqlite"]) == {"0003_notify.sql"}
    assert set(schema.STEPS["sqlite"]) <= set(schema.STEPS["postgres"])


def test_sqlite_file_is_in_wal_mode(migrated_url: str) -> None:
    if current_dialect() != "sqlite":
        pytest.skip("journal mode is SQLite only")
    with raw_connection(migrated_url) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
