"""The row a submit returns is the row it wrote.

Submit reads back only the values the database chose (its clock readings) and
builds the rest of the returned row from its own parameters. Pins: every
column of that row, for single, bulk and keyed submits with every option set,
equals a fresh read of the same row; and bulk submits on PostgreSQL go through
prepared statements (server-side binding) and the Django-logged path alike.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from cairnq_django.protocol import payload
from cairnq_django.models import Task
from cairnq_django.store.base import Store, SubmitSpec

COLUMNS = [field.attname for field in Task._meta.concrete_fields]

PAYLOAD = {"b": [1, 2.5, None, True], "a": {"é": "ünïcode", "nested": {"k": "v"}}, "2": "int key"}


def spec(name: str = "rows.job", **kwargs: Any) -> SubmitSpec:
    return SubmitSpec(name=name, payload_json=payload.encode_object(PAYLOAD), **kwargs)


def assert_same_row(returned: Task, store: Store) -> None:
    # Every column is set (a missing one would be loaded lazily, hiding the gap).
    assert returned.get_deferred_fields() == set()
    stored = store.get(returned.id)
    assert stored is not None
    for column in COLUMNS:
        assert getattr(returned, column) == getattr(stored, column), column
    assert returned._state.db == stored._state.db
    assert returned._state.adding is False


FULL_OPTIONS: dict[str, Any] = {
    "queue": "rows-q",
    "priority": 7,
    "max_attempts": 5,
    "delay_ms": 60_000,
    "metadata_json": payload.encode_object({"who": "test", "n": 3}),
    "correlation_id": "corr-1",
    "parent_id": "parent-1",
    "root_id": "root-1",
}


def test_single_submit_returns_the_stored_row(store: Store) -> None:
    assert_same_row(store.submit(spec()), store)
    assert_same_row(store.submit(spec(**FULL_OPTIONS)), store)


def test_keyed_submit_returns_the_stored_row(store: Store) -> None:
    created = store.submit(spec(key="rows-key", **FULL_OPTIONS))
    assert_same_row(created, store)
    reused = store.submit(spec(key="rows-key"))
    assert reused.id == created.id
    assert_same_row(reused, store)


def test_bulk_submit_returns_the_stored_rows_in_order(store: Store) -> None:
    specs = [spec(priority=i % 3) for i in range(600)]  # more than one insert chunk
    specs.insert(17, spec(**FULL_OPTIONS))
    specs.insert(40, spec(key="bulk-key"))
    rows = store.submit_many(specs)
    assert [row.priority for row in rows] == [s.priority for s in specs]
    assert rows[17].correlation_id == "corr-1" and rows[40].queue == "default"
    for row in rows[::37] + [rows[17], rows[40]]:
        assert_same_row(row, store)
    assert len({row.id for row in rows}) == len(specs)


def test_bulk_submit_works_while_django_logs_queries(store: Store) -> None:
    # Query logging switches PostgreSQL from prepared statements to Django's
    # default cursor; both must bind the per-column arrays.
    connection = connections[store.alias]
    with CaptureQueriesContext(connection) as captured:
        rows = store.submit_many([spec(), spec(**FULL_OPTIONS)])
    assert any("INSERT INTO cairnq_tasks" in (q["sql"] or "") for q in captured.captured_queries)
    for row in rows:
        assert_same_row(row, store)


def test_bulk_submit_with_prepared_statements_off(store: Store, settings: Any) -> None:
    settings.CAIRNQ = {**getattr(settings, "CAIRNQ", {}), "PREPARED_STATEMENTS": False}
    rows = store.submit_many([spec(), spec(**FULL_OPTIONS)])
    for row in rows:
        assert_same_row(row, store)


@pytest.mark.parametrize("prepared", [True, False])
def test_postgres_statements_prepare_only_when_enabled(store: Store, settings: Any, prepared: bool) -> None:
    if store.dialect != "postgres":
        pytest.skip("prepared statements are a PostgreSQL feature")
    settings.CAIRNQ = {**getattr(settings, "CAIRNQ", {}), "PREPARED_STATEMENTS": prepared}
    connection = connections[store.alias]
    connection.close()
    store.submit(spec())
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        (count,) = cursor.fetchone()
    assert (count > 0) is prepared
