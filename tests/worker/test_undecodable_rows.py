"""A row whose payload or metadata Python cannot decode fails alone, in a real
worker process: that task ends ``failed`` with a ``bad_payload`` envelope on
its first attempt, its handler never called; every task claimed beside it runs
once and succeeds (no lease expiry, no redelivery); the queue keeps moving
(a ``--burst`` worker drains it and exits). Single claims, batch handlers,
async handlers, and payloads the claim leaves in the database alike. A running
row with no lease (a foreign writer) is recovered and runs.

The bad rows are written with raw SQL, as a foreign SDK would.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection

import cairnq_django as cq
from cairnq_django.models import Task
from tests._foreign_rows import BIG_INT, DEEP, JSON5, LARGE_DEEP, leaseless, overwrite

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {"LEASE_MS": 3000, "HEARTBEAT_INTERVAL_MS": 500, "POLL_INTERVAL_MS": 50, "CONCURRENCY": 8}


def _final(ids: list[str]) -> dict[str, Task]:
    rows = {task_id: cq.get(task_id) for task_id in ids}
    assert all(row is not None for row in rows.values())
    return rows  # type: ignore[return-value]


def _drain(start_worker: Any) -> str:
    worker = start_worker("--burst", overrides=FAST)
    code = worker.wait(90)
    output = worker.output()
    assert code == 0, output[-3000:]
    return output


def _assert_bad_payload(row: Task, column: str) -> None:
    assert (row.status, row.attempt) == ("failed", 1), (row.status, row.attempt, row.error)
    error = row.error
    assert set(error) == {"type", "code", "message", "retryable", "details"}, error
    assert (error["type"], error["code"], error["retryable"], error["details"]) == (
        "BadPayload", "bad_payload", False, {}), error
    assert f"stored {column} cannot be decoded" in error["message"], error
    assert "Error" in error["message"], error  # the reason: RecursionError / ValueError / JSONDecodeError


def _started_ids(ledger: Any) -> list[str]:
    events = ledger()
    ids = [event["task_id"] for event in events if event["event"] == "start"]
    for event in events:
        if event["event"] == "batch":
            ids.extend(event["ids"])
    return ids


def test_single_claims_fail_only_the_undecodable_rows(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    good = [cq.submit("faults.echo", {}).id for _ in range(4)]
    deep_payload = cq.submit("faults.echo", {}).id
    big_metadata = cq.submit("faults.echo", {}).id
    third = cq.submit("faults.echo", {}).id
    good_async = cq.submit("demo.async_echo", {"v": 1}).id
    bad_async = cq.submit("demo.async_echo", {"v": 2}).id
    overwrite(deep_payload, "payload", DEEP)
    overwrite(big_metadata, "metadata", BIG_INT)
    overwrite(bad_async, "payload", BIG_INT)
    # SQLite: malformed text got past the CHECK; PostgreSQL's jsonb cannot hold
    # it, so there the third bad row is one more over-deep payload.
    overwrite(third, "payload", JSON5 if connection.vendor == "sqlite" else DEEP)
    output = _drain(start_worker)
    rows = _final([*good, deep_payload, big_metadata, third, good_async, bad_async])
    for task_id in good:
        assert (rows[task_id].status, rows[task_id].attempt) == ("succeeded", 1), rows[task_id].error
    assert (rows[good_async].status, rows[good_async].result) == ("succeeded", {"echo": {"v": 1}})
    _assert_bad_payload(rows[deep_payload], "payload")
    _assert_bad_payload(rows[big_metadata], "metadata")
    _assert_bad_payload(rows[third], "payload")
    _assert_bad_payload(rows[bad_async], "payload")
    assert "RecursionError" in rows[deep_payload].error["message"]
    assert "digits" in rows[big_metadata].error["message"]
    started = _started_ids(ledger)
    assert sorted(started) == sorted(good), started  # the handler never saw a bad row
    assert "claim failed" not in output, output[-3000:]


def test_a_batch_runs_every_task_but_the_undecodable_ones(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    ids = [cq.submit("demo.batch", {"n": n}).id for n in range(6)]
    overwrite(ids[1], "payload", DEEP)
    overwrite(ids[4], "metadata", BIG_INT)
    _drain(start_worker)
    rows = _final(ids)
    for n, task_id in enumerate(ids):
        if n == 1:
            _assert_bad_payload(rows[task_id], "payload")
        elif n == 4:
            _assert_bad_payload(rows[task_id], "metadata")
        else:
            row = rows[task_id]
            assert (row.status, row.attempt, row.result) == ("succeeded", 1, {"double": 2 * n}), row.error
    started = _started_ids(ledger)
    assert sorted(started) == sorted(ids[n] for n in (0, 2, 3, 5)), started


def test_a_deferred_payload_that_turns_out_undecodable_fails_alone(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    # Over 256 KiB: the claim leaves these payloads in the database and the
    # handler's thread fetches them; the bad text shows only then.
    sync_bad, sync_good = cq.submit("faults.echo", {}).id, cq.submit("faults.echo", {"blob": "y" * 300_000}).id
    async_bad = cq.submit("demo.async_echo", {}).id
    batch = [cq.submit("demo.batch", {"n": n}).id for n in range(4)]
    for task_id in (sync_bad, async_bad, batch[2]):
        overwrite(task_id, "payload", LARGE_DEEP)
    _drain(start_worker)
    rows = _final([sync_bad, sync_good, async_bad, *batch])
    for task_id in (sync_bad, async_bad, batch[2]):
        _assert_bad_payload(rows[task_id], "payload")
    assert (rows[sync_good].status, rows[sync_good].result) == ("succeeded", {"size": 300_000})
    for n in (0, 1, 3):
        row = rows[batch[n]]
        assert (row.status, row.attempt, row.result) == ("succeeded", 1, {"double": 2 * n}), row.error
    started = _started_ids(ledger)
    assert sorted(started) == sorted([sync_good, batch[0], batch[1], batch[3]]), started


def test_the_bad_row_can_be_retried_and_canceled_after(cairnq_db: Any, start_worker: Any) -> None:
    bad = cq.submit("faults.echo", {}).id
    overwrite(bad, "payload", DEEP)
    _drain(start_worker)
    _assert_bad_payload(_final([bad])[bad], "payload")
    # Retried as is, it fails the same way, alone; mended, it runs.
    assert cq.retry(bad, reset_attempt=True) is not None
    _drain(start_worker)
    _assert_bad_payload(_final([bad])[bad], "payload")
    overwrite(bad, "payload", "{}")
    assert cq.retry(bad, reset_attempt=True) is not None
    _drain(start_worker)
    assert _final([bad])[bad].status == "succeeded"


def test_a_running_row_without_a_lease_is_recovered_and_runs(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    stuck = cq.submit("faults.echo", {}).id
    spent = cq.submit("faults.echo", {}).id
    leaseless(stuck, attempt=1)
    leaseless(spent, attempt=3)
    started = time.monotonic()
    _drain(start_worker)
    rows = _final([stuck, spent])
    assert (rows[stuck].status, rows[stuck].attempt) == ("succeeded", 2), rows[stuck].error
    assert rows[stuck].lease_until_ms is None and rows[stuck].worker_id != "foreign"
    assert rows[spent].status == "failed" and rows[spent].error["code"] == "lease_expired"
    assert _started_ids(ledger) == [stuck]
    assert time.monotonic() - started < 60
