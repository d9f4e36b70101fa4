"""A wait's timeout says when no live worker serves the task it waited for, the usual cause.

Pins: a ``TaskTimeout`` that does not name the queue no live registered
worker serves, or the task whose handler the queue's live workers lack; a
hint while a live worker serves both, for a task already running, or because
of a lost or stopped worker; the registry read while polling or more than
once; a failed read that raises instead of leaving the plain message, or
that leaves the caller's transaction aborted; and the async wait without it.
"""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

import cairnq_django as cq
from cairnq_django.client import unserved
from cairnq_django.models import Task, Worker
from cairnq_django.store.base import WorkerRecord

BEAT_MS = 1_000
NO_WORKER = "no live worker serves queue 'hint-q'; is `manage.py cairnq_worker --queue hint-q` running?"


def register(store: Any, worker_id: str, queues: list[str], names: list[str], *, lost: bool = False,
             stopped: bool = False) -> None:
    """Register a worker through the store's beat; age it past three beats (lost) or stop it."""
    record = WorkerRecord(
        worker_id=worker_id, host="host-h", pid=1, queues=queues, names=names, concurrency=1, resources={},
        global_resources={}, version="", heartbeat_interval_ms=BEAT_MS, in_flight=0, succeeded=0, failed=0,
        per_minute=0.0,
    )
    store.worker_beat(record, [], 30_000)
    if stopped:
        assert store.stop_worker(record)
    if lost:
        seen = Worker.objects.get(pk=worker_id).last_seen_at_ms
        Worker.objects.filter(pk=worker_id).update(last_seen_at_ms=seen - 4 * BEAT_MS)


def timeout_of(task_id: str) -> cq.TaskTimeout:
    with pytest.raises(cq.TaskTimeout) as info:
        cq.wait(task_id, timeout=0.05, poll_ms=10)
    return info.value


def test_the_timeout_names_the_queue_no_live_worker_serves(store: Any) -> None:
    task = cq.submit("hint.send", queue="hint-q")
    error = timeout_of(task.id)
    assert str(error) == f"timed out waiting for task {task.id}: {error.hint}"
    assert error.hint is not None and error.hint.startswith(NO_WORKER)
    # Another SDK's workers may serve it: the hint says which ones it counted.
    assert "only this app's cairnq_worker processes register" in error.hint
    assert error.task_id == task.id and error.snapshot.status == "queued"


def test_the_timeout_names_the_task_the_live_workers_have_no_handler_for(store: Any) -> None:
    register(store, "worker_other_names", ["hint-q"], ["hint.other"])
    task = cq.submit("hint.send", queue="hint-q")
    assert timeout_of(task.id).hint.startswith(
        "the live workers serving queue 'hint-q' have no handler for task 'hint.send'"
    )


def test_no_hint_while_a_live_worker_serves_queue_and_name(store: Any) -> None:
    register(store, "worker_serving", ["other-q", "hint-q"], ["hint.other", "hint.send"])
    task = cq.submit("hint.send", queue="hint-q")
    error = timeout_of(task.id)
    assert error.hint is None
    assert str(error) == f"timed out waiting for task {task.id}"


def test_lost_and_stopped_workers_serve_nothing(store: Any) -> None:
    register(store, "worker_lost", ["hint-q"], ["hint.send"], lost=True)
    register(store, "worker_stopped", ["hint-q"], ["hint.send"], stopped=True)
    task = cq.submit("hint.send", queue="hint-q")
    assert timeout_of(task.id).hint.startswith(NO_WORKER)


def test_no_hint_once_a_worker_holds_the_task(store: Any) -> None:
    task = cq.submit("hint.send", queue="hint-q")
    (claimed,) = store.claim(["hint-q"], "unregistered-worker", lease_ms=30_000)
    assert claimed.id == task.id
    assert timeout_of(task.id).hint is None


def test_call_and_its_async_twin_say_so_too(store: Any) -> None:
    with pytest.raises(cq.TaskTimeout) as info:
        cq.call("hint.send", {}, queue="hint-q", timeout=0.05, poll_ms=10)
    assert info.value.hint.startswith(NO_WORKER)

    async def scenario() -> cq.TaskTimeout:
        with pytest.raises(cq.TaskTimeout) as info:
            await cq.acall("hint.send", {}, queue="hint-q", timeout=0.05, poll_ms=10)
        return info.value

    # async_to_sync from the test thread: the thread-sensitive reads use this thread's connection.
    assert async_to_sync(scenario)().hint.startswith(NO_WORKER)


def test_the_registry_is_read_once_after_the_deadline(store: Any) -> None:
    task = cq.submit("hint.send", queue="hint-q")
    with CaptureQueriesContext(connections[store.alias]) as queries:
        error = timeout_of(task.id)
    registry_reads = [query["sql"] for query in queries.captured_queries if Worker._meta.db_table in query["sql"]]
    assert len(registry_reads) == 1, registry_reads
    # The last statement of the wait: nothing read the registry while polling.
    assert queries.captured_queries[-1]["sql"] == registry_reads[0]
    assert error.hint is not None


def test_a_failed_read_leaves_the_plain_message_and_the_transaction(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Any, compiler: Any, connection: Any) -> tuple[str, tuple[int, ...]]:
        return "no_such_column_h2", ()

    monkeypatch.setattr(unserved.StoreNowMs, "as_sql", broken)
    monkeypatch.setattr(unserved.StoreNowMs, "as_postgresql", broken)
    with transaction.atomic(using=store.alias):
        task = cq.submit("hint.send", queue="hint-q")
        error = timeout_of(task.id)
        assert error.hint is None and str(error) == f"timed out waiting for task {task.id}"
        # PostgreSQL would refuse every further statement of an aborted transaction.
        assert Task.objects.using(store.alias).filter(pk=task.id).exists()
