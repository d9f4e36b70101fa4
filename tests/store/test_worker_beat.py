"""``Store.worker_beat``, ``stop_worker``, ``prune_workers`` and ``worker_tasks``: the registry's writes.

Pins: a beat that renews leases differently from ``heartbeat_batch`` (a
lost lease renewed, a cancel flag dropped); a beat that does not refresh the
row when it has no lease to renew; a beat that overwrites the start time or
fails once the row was pruned; a PostgreSQL beat that takes two statements
(two round trips, two commits) instead of one; and ``worker_tasks`` listing
a task the worker no longer runs.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cairnq_django.models import Worker
from cairnq_django.store import SubmitSpec
from cairnq_django.store.base import Store, WorkerRecord

RECORD = WorkerRecord(
    worker_id="w1",
    host="h",
    pid=1,
    queues=["default"],
    names=["t"],
    concurrency=2,
    resources={"gpu": 1},
    global_resources={"openai": 2},
    version="9.9",
    heartbeat_interval_ms=1_000,
)


def submit(store: Store) -> str:
    return store.submit(SubmitSpec(name="t", payload_json=json.dumps({}))).id


def test_beat_renews_like_heartbeat_batch_and_refreshes_the_row(store: Store) -> None:
    a, b, c = (submit(store) for _ in range(3))
    assert len(store.claim(["default"], "w1", limit=3, lease_ms=10_000)) == 3
    store.cancel(b)
    store.complete(c, "w1", None)
    assert store.worker_beat(RECORD, [], 10_000) == {}  # the registration: no leases
    row = Worker.objects.get(pk="w1")
    assert (row.queues, row.resources, row.global_resources) == (["default"], {"gpu": 1}, {"openai": 2})
    assert row.version == "9.9"
    time.sleep(0.01)
    counted = dataclasses.replace(RECORD, in_flight=2, succeeded=5, failed=1, per_minute=3.5)
    beats = store.worker_beat(counted, [a, b, c], 60_000)
    assert set(beats) == {a, b} and beats[a] is None and beats[b] is not None
    again = Worker.objects.get(pk="w1")
    assert again.last_seen_at_ms > row.last_seen_at_ms and again.started_at_ms == row.started_at_ms
    assert (again.in_flight, again.succeeded, again.failed, again.per_minute) == (2, 5, 1, 3.5)
    # Another worker's beat renews none of w1's leases but registers itself.
    assert store.worker_beat(dataclasses.replace(RECORD, worker_id="w2"), [a], 60_000) == {}
    assert Worker.objects.filter(pk="w2").exists()


def test_beat_without_leases_still_refreshes_and_brings_a_pruned_row_back(store: Store) -> None:
    store.worker_beat(RECORD, [], 10_000)
    seen = Worker.objects.get(pk="w1").last_seen_at_ms
    time.sleep(0.01)
    store.worker_beat(RECORD, [], 10_000)
    assert Worker.objects.get(pk="w1").last_seen_at_ms > seen
    Worker.objects.filter(pk="w1").delete()
    store.worker_beat(RECORD, [], 10_000)
    assert Worker.objects.get(pk="w1").stopped_at_ms is None


def test_a_postgres_beat_is_one_statement(store: Store, dialect: str) -> None:
    task = submit(store)
    store.claim(["default"], "w1", lease_ms=10_000)
    with CaptureQueriesContext(connection) as queries:
        assert set(store.worker_beat(RECORD, [task], 10_000)) == {task}
    statements = [q["sql"] for q in queries.captured_queries]
    if dialect == "postgres":
        assert len(statements) == 1 and "INSERT INTO cairnq_django_worker" in statements[0]
    else:
        # SQLite: the upsert and the renewal inside one transaction (one commit).
        assert any("INSERT INTO cairnq_django_worker" in sql for sql in statements)
        assert any("UPDATE cairnq_tasks" in sql for sql in statements)


def test_stop_prune_and_running_tasks(store: Store) -> None:
    assert store.stop_worker(RECORD) is False  # never registered
    store.worker_beat(RECORD, [], 10_000)
    running, done = submit(store), submit(store)
    assert len(store.claim(["default"], "w1", limit=2, lease_ms=10_000)) == 2
    store.complete(done, "w1", None)
    assert [task.id for task in store.worker_tasks("w1")] == [running]
    assert store.worker_tasks("w2") == []
    assert store.stop_worker(dataclasses.replace(RECORD, succeeded=3)) is True
    row = Worker.objects.get(pk="w1")
    assert row.stopped_at_ms is not None and row.succeeded == 3
    assert store.prune_workers(60_000) == 0
    Worker.objects.filter(pk="w1").update(last_seen_at_ms=row.last_seen_at_ms - 61_000)
    assert store.prune_workers(60_000) == 1
    with pytest.raises(ValueError, match="keep_ms"):
        store.prune_workers(True)
