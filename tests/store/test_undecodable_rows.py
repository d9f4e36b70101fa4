"""Rows another SDK, raw SQL or an older version could write, that pass the
database's checks yet Python cannot decode: every read carries the column as a
``payload.Undecodable`` (raw text and reason) instead of raising, so the rows
beside it are read normally and the row itself can be found, cancelled and
retried. A running row with no lease at all is recovered like an expired one.

The bad rows are written with raw SQL, as a foreign writer would.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import DataError, connection

import cairnq_django as cq
from cairnq_django.client.wait import outcome
from cairnq_django.protocol.payload import Undecodable
from cairnq_django.store.rows import PAYLOAD_BYTES
from tests._foreign_rows import (
    BIG_INT,
    DEEP,
    KINDS,
    LARGE_DEEP,
    assert_python_refuses_them,
    leaseless,
    overwrite,
    write_bad,
)

def test_the_texts_are_what_python_refuses() -> None:
    assert_python_refuses_them()


def _marker(value: Any, text: str) -> Undecodable:
    assert isinstance(value, Undecodable), value
    # PostgreSQL answers with its own rendering of the jsonb value.
    if connection.vendor == "sqlite":
        assert value.text == text
    else:
        assert value.text.replace(" ", "") == text.replace(" ", "")
    assert value.reason
    return value


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("column", ["payload", "metadata"])
def test_reads_carry_the_marker_and_the_other_rows(store: Any, kind: str, column: str) -> None:
    before = cq.submit("demo.noop", {"i": 1}, key="before")
    bad = cq.submit("demo.noop", {"i": 2}, key="bad")
    after = cq.submit("demo.noop", {"i": 3}, key="after")
    if not write_bad(bad.id, column, kind):
        return  # PostgreSQL's jsonb refused it: no such row can exist there
    text = KINDS[kind]
    got = store.get(bad.id)
    assert got is not None and got.status == "queued"
    _marker(getattr(got, column), text)
    assert cq.get(bad.id) is not None and isinstance(getattr(cq.get(bad.id), column), Undecodable)
    assert isinstance(getattr(cq.get_by_key("bad"), column), Undecodable)
    listed = {task.id: task for task in cq.list()}
    assert set(listed) == {before.id, bad.id, after.id}
    assert listed[before.id].payload == {"i": 1} and listed[after.id].payload == {"i": 3}
    assert listed[before.id].metadata == {} and listed[after.id].metadata == {}
    _marker(getattr(listed[bad.id], column), text)
    # A claim draws the bad row beside the good ones; each good one is intact.
    claimed = {task.id: task for task in store.claim(["default"], "w1", limit=10)}
    assert set(claimed) == {before.id, bad.id, after.id}
    assert claimed[before.id].payload == {"i": 1} and claimed[after.id].payload == {"i": 3}
    _marker(getattr(claimed[bad.id], column), text)
    # The operator can cancel it (the answer carries the marker too), and retry it.
    canceled = cq.cancel(bad.id)
    assert canceled is not None and canceled.cancel_requested
    assert isinstance(getattr(canceled, column), Undecodable)
    error = {"type": "X", "code": "x", "message": "x", "retryable": False, "details": {}}
    assert store.fail(bad.id, "w1", error, retryable=False).status == "canceled"
    retried = cq.retry(bad.id)
    assert retried is not None and retried.status == "queued"
    assert isinstance(getattr(retried, column), Undecodable)


def test_async_reads_carry_the_marker(store: Any) -> None:
    bad = cq.submit("demo.noop", {"i": 2}, key="bad")
    overwrite(bad.id, "payload", DEEP)

    async def read() -> tuple[Any, Any, Any]:
        return await cq.aget(bad.id), await cq.aget_by_key("bad"), await cq.alist()

    # async_to_sync from the test thread: the thread-sensitive reads come back
    # to this thread and its database connection.
    one, by_key, listed = async_to_sync(read)()
    assert isinstance(one.payload, Undecodable) and isinstance(by_key.payload, Undecodable)
    assert [isinstance(task.payload, Undecodable) for task in listed] == [True]


def test_one_bad_column_among_many_rows_leaves_every_other_value_in_place(store: Any) -> None:
    # The batched decode's fallback must assign each row its own values.
    ids = [cq.submit("demo.noop", {"i": i}, metadata={"m": i}).id for i in range(40)]
    overwrite(ids[17], "payload", BIG_INT)
    overwrite(ids[23], "metadata", DEEP)
    rows = {task.id: task for task in store.claim(["default"], "w1", limit=100)}
    for i, task_id in enumerate(ids):
        row = rows[task_id]
        if i == 17:
            assert isinstance(row.payload, Undecodable) and row.metadata == {"m": i}
        elif i == 23:
            assert isinstance(row.metadata, Undecodable) and row.payload == {"i": i}
        else:
            assert (row.payload, row.metadata) == ({"i": i}, {"m": i})


def test_malformed_parts_that_join_into_a_valid_array_are_decoded_one_by_one(store: Any) -> None:
    # Two malformed texts that together read as one value: the joined array
    # has fewer values than texts, so the rows are decoded one by one.
    a = cq.submit("demo.noop", {"i": 1}).id
    b = cq.submit("demo.noop", {"i": 2}).id
    if connection.vendor == "postgresql":
        with pytest.raises(DataError):
            overwrite(a, "payload", '{"x":[1')
        return
    overwrite(a, "payload", '{"x":[1')
    overwrite(b, "payload", '2]}')
    rows = {task.id: task for task in store.list(limit=10)}
    assert isinstance(rows[a].payload, Undecodable) and isinstance(rows[b].payload, Undecodable)
    assert rows[a].metadata == {} and rows[b].metadata == {}


def test_a_deferred_large_payload_loads_as_the_marker(store: Any) -> None:
    big = cq.submit("demo.noop", {"i": 1}).id
    overwrite(big, "payload", LARGE_DEEP)
    [claimed] = store.claim(["default"], "w1", limit=1)
    assert "payload" not in claimed.__dict__ and claimed.__dict__[PAYLOAD_BYTES] > 262_144
    _marker(store.get_payload(big), LARGE_DEEP)


def test_wait_and_call_outcomes_for_undecodable_results(store: Any) -> None:
    from cairnq_django.exceptions import SerializationError, TaskFailed

    done = cq.submit("demo.noop", {}).id
    store.claim(["default"], "w1", limit=1)
    store.complete(done, "w1", None)
    overwrite(done, "result", DEEP)
    final = cq.wait(done, timeout=5)
    assert isinstance(final.result, Undecodable)
    with pytest.raises(SerializationError, match="result"):
        outcome(final)
    failed = cq.submit("demo.noop", {}).id
    store.claim(["default"], "w1", limit=1)
    store.fail(failed, "w1", {"type": "X", "code": "x", "message": "m", "retryable": False, "details": {}},
               retryable=False)
    overwrite(failed, "error", BIG_INT)
    with pytest.raises(TaskFailed) as info:
        outcome(cq.wait(failed, timeout=5))
    assert info.value.code == "bad_payload" and "error" in info.value.message


# ---- running rows without a lease -------------------------------------------

def test_a_running_row_without_a_lease_is_recovered(store: Any) -> None:
    again = cq.submit("demo.noop", {"i": 1}).id
    spent = cq.submit("demo.noop", {"i": 2}).id
    stopped = cq.submit("demo.noop", {"i": 3}).id
    leaseless(again, attempt=1)
    leaseless(spent, attempt=3)
    leaseless(stopped, attempt=1)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE cairnq_tasks SET cancel_requested_at_ms = 1 WHERE id = %s", [stopped])
    probe = store.probe_claim(["nowhere"], None)
    assert probe.expired and not probe.due
    # A worker asks about such rows once per lease period only.
    assert not store.probe_claim(["nowhere"], None, leaseless=False).expired
    assert store.recover_leases() == 3
    rows = {task.id: task for task in cq.list()}
    assert (rows[again].status, rows[again].worker_id, rows[again].lease_until_ms) == ("queued", None, None)
    assert rows[spent].status == "failed" and rows[spent].error["code"] == "lease_expired"
    assert rows[stopped].status == "canceled"
    assert not store.probe_claim(["nowhere"], None).expired
    # The claim session recovers it on its own, then claims it.
    leaseless(again, attempt=1)
    [claimed] = store.claim(["default"], "w1", limit=1)
    assert claimed.id == again and claimed.attempt == 2 and claimed.lease_until_ms is not None
