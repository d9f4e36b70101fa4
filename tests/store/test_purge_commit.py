"""How a purge batch commits on PostgreSQL (purge.sql).

Pins: a batch run on its own waiting for the disk flush while it holds the
doomed rows' locks (a checkpoint's writes held one for 171 ms in
bench/big_table.py purge), and a batch run inside the caller's transaction
relaxing that transaction's commit, which holds the caller's own writes.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection, transaction

from cairnq_django.store.base import Store, SubmitSpec


def finished(store: Store, n: int) -> None:
    store.submit_many([SubmitSpec(name="job", payload_json="{}") for _ in range(n)])
    rows = store.claim(["default"], "w1", limit=n)
    store.complete_many("w1", [(row.id, None) for row in rows])
    time.sleep(0.005)


def synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('synchronous_commit')")
        return str(cursor.fetchone()[0])


@pytest.fixture
def purge_params(dialect: str) -> Any:
    """The parameters of each purge statement run while the fixture is open."""
    if dialect != "postgres":
        pytest.skip("synchronous_commit is a PostgreSQL setting")
    seen: list[dict[str, Any]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "DELETE FROM cairnq_tasks" in sql:
            seen.append(dict(params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield seen


def test_a_batch_on_its_own_commits_without_waiting_for_the_flush(store: Store, purge_params: Any) -> None:
    finished(store, 3)
    assert len(store.purge(older_than_ms=0)) == 3
    assert [params["synchronous_commit"] for params in purge_params] == ["off"]
    assert synchronous_commit() == "on"  # SET LOCAL: nothing past the batch's own transaction


def test_a_batch_inside_the_callers_transaction_leaves_its_commit_alone(store: Store, purge_params: Any) -> None:
    finished(store, 3)
    with transaction.atomic():
        assert len(store.purge(older_than_ms=0)) == 3
        assert synchronous_commit() == "on"
    assert [params["synchronous_commit"] for params in purge_params] == [None]
