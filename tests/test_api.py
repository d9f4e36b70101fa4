"""Pin the public Python API's contract: arguments validated in protocol order with
nothing written on refusal, JSON refused where other SDKs could not read it, SQL
metacharacters kept as data, submit joining the caller's transaction (and its
signal waiting for the commit), wait/call outcomes and timeouts, and the submit gate
(grants, shared probes, QueueFull)."""

from __future__ import annotations

import datetime as dt
import math
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.test import override_settings

import cairnq_django as cq
from cairnq_django.client import wait as _wait, backpressure
from cairnq_django import signals
from cairnq_django.protocol.payload import encode

from tests._threads import Later

WORKER = "worker_test"


def queued_count(queue: str | None = None) -> int:
    with connection.cursor() as cursor:
        if queue is None:
            cursor.execute("SELECT COUNT(*) FROM cairnq_tasks")
        else:
            cursor.execute("SELECT COUNT(*) FROM cairnq_tasks WHERE queue = %s", [queue])
        return int(cursor.fetchone()[0])


def claim_one(store: Any, queue: str) -> Any:
    rows = store.claim([queue], WORKER, lease_ms=30_000)
    assert len(rows) == 1
    return rows[0]


def finish(store: Any, queue: str, result: Any) -> str:
    task = claim_one(store, queue)
    store.complete(task.id, WORKER, encode(result))
    return task.id


def fail_permanently(store: Any, queue: str, envelope: dict[str, Any]) -> str:
    task = claim_one(store, queue)
    store.fail(task.id, WORKER, envelope, retryable=False)
    return task.id


@pytest.fixture
def enqueued() -> Iterator[list[Any]]:
    """Collect the tasks ``task_enqueued`` announces."""
    seen: list[Any] = []

    def receiver(sender: Any, task: Any, **kwargs: Any) -> None:
        seen.append(task)

    signals.task_enqueued.connect(receiver, weak=False)
    yield seen
    signals.task_enqueued.disconnect(receiver)


# ------------------------------------------------------------------ submit
def test_submit_returns_the_queued_row_and_get_reads_it(cairnq_db: Any) -> None:
    task = cq.submit(
        "reports.build",
        {"n": 1, "tags": ["a", None], "nested": {"ü": "✓"}},
        queue="reports",
        priority=5,
        max_attempts=7,
        metadata={"by": "test"},
        correlation_id="corr-1",
        parent_id="task_parent",
    )
    assert isinstance(task, cq.Task)
    assert task.id.startswith("task_") and len(task.id) == 31
    assert (task.name, task.queue, task.status) == ("reports.build", "reports", "queued")
    assert task.is_queued and not task.is_terminal
    assert (task.priority, task.max_attempts, task.attempt) == (5, 7, 0)
    assert task.metadata == {"by": "test"}
    assert task.root_id == task.id  # a top-level submit roots its own tree
    assert (task.parent_id, task.correlation_id) == ("task_parent", "corr-1")
    again = cq.get(task.id)
    assert again is not None and again.payload == {"n": 1, "tags": ["a", None], "nested": {"ü": "✓"}}
    assert cq.get_status(task.id) == (task.id, "queued")
    assert cq.get_status(task.id).status == "queued"
    assert cq.get("task_missing") is None and cq.get_status("task_missing") is None


def test_payload_and_metadata_default_to_empty_objects(cairnq_db: Any) -> None:
    task = cq.submit("x")
    assert cq.get(task.id).payload == {} and cq.get(task.id).metadata == {}


def test_delay_sets_run_at_in_the_future(cairnq_db: Any) -> None:
    task = cq.submit("x", delay_ms=60_000)
    assert task.run_at_ms - task.created_at_ms >= 59_000


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"conflict": "update"}, "conflict"),
        ({"conflict": None}, "conflict"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"delay_ms": -1}, "delay_ms"),
        ({"delay_ms": 1.5}, "delay_ms"),
        ({"name": ""}, "name"),
        ({"name": 7}, "name"),
        ({"queue": ""}, "queue"),
        ({"queue": None}, "queue"),
        ({"priority": "high"}, "priority"),
        ({"key": ""}, "key"),
        ({"correlation_id": 5}, "correlation_id"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(
    cairnq_db: Any, kwargs: dict[str, Any], argument: str
) -> None:
    call = {"name": "x", "payload": {}, **kwargs}
    with pytest.raises(ValueError, match=argument) as info:
        cq.submit(call.pop("name"), call.pop("payload"), **call)
    assert not isinstance(info.value, cq.SerializationError)
    assert queued_count() == 0


def test_validation_follows_protocol_order(cairnq_db: Any) -> None:
    with pytest.raises(ValueError, match="conflict"):
        cq.submit("x", {"v": math.nan}, conflict="nope", max_attempts=0, delay_ms=-1)
    with pytest.raises(ValueError, match="max_attempts"):
        cq.submit("x", {"v": math.nan}, max_attempts=0, delay_ms=-1)
    with pytest.raises(ValueError, match="delay_ms"):
        cq.submit("x", {"v": math.nan}, delay_ms=-1)
    with pytest.raises(cq.SerializationError):
        cq.submit("x", {"v": math.nan})
    assert queued_count() == 0


@pytest.mark.parametrize(
    "payload",
    [
        [1, 2],
        "text",
        42,
        (1, 2),
        {"v": math.nan},
        {"v": math.inf},
        {"v": -math.inf},
        {"v": {1, 2}},
        {"v": b"bytes"},
        {"v": dt.datetime(2024, 1, 1)},
        {"v": dt.date(2024, 1, 1)},
        {"v": Decimal("1.5")},
        {"v": uuid.uuid4()},
        {"v": object()},
        {"deep": [{"v": [math.nan]}]},
    ],
    ids=lambda p: type(p).__name__ if not isinstance(p, dict) else repr(p)[:30],
)
def test_payloads_json_cannot_carry_are_refused(cairnq_db: Any, payload: Any) -> None:
    with pytest.raises(cq.SerializationError):
        cq.submit("x", payload)
    with pytest.raises(cq.SerializationError):
        cq.submit("x", {}, metadata=payload if isinstance(payload, dict) else [payload])
    assert queued_count() == 0


def test_json_values_roundtrip(cairnq_db: Any) -> None:
    payload = {"null": None, "t": True, "f": 1.25, "big": 2**53, "empty": {}, "list": [],
               "text": "naïve — 日本 🎉", "tuple": (1, 2), "1": "key"}
    task = cq.submit("x", payload)
    assert cq.get(task.id).payload == {**payload, "tuple": [1, 2]}


METACHARACTERS = [
    "x'); DROP TABLE cairnq_tasks; --",
    'quote" and \\ backslash',
    "%s %(name)s %% %",
    "semi;colon -- comment /* c */",
    "ключ 🔑 \t tab",
]


@pytest.mark.parametrize("text", METACHARACTERS)
def test_sql_metacharacters_are_data(cairnq_db: Any, text: str) -> None:
    task = cq.submit(text, {"text": text}, queue=text, key=text, correlation_id=text)
    assert (task.name, task.queue) == (text, text)
    assert cq.get_by_key(text).id == task.id
    assert cq.get_status_by_key(text) == (task.id, "queued")
    assert [t.id for t in cq.list(name=text)] == [task.id]
    assert [t.id for t in cq.list(queue=text)] == [task.id]
    assert [t.id for t in cq.list(correlation_id=text)] == [task.id]
    assert cq.stats(text)[text]["queued"] == 1
    assert cq.queue_depth(text, 10) == 9
    assert cq.submit(text, {}, key=text).id == task.id
    assert cq.cancel_by_key(text).status == "canceled"
    assert cq.get(task.id).payload == {"text": text}
    assert queued_count() == 1  # the table is still there, with one row


# ------------------------------------------------------------------ keys
def test_keyed_conflict_strategies(cairnq_db: Any) -> None:
    first = cq.submit("x", {"n": 1}, key="order-1")
    assert cq.submit("x", {"n": 2}, key="order-1").id == first.id
    assert cq.submit("x", {"n": 2}, key="order-1", conflict="reuse-succeeded").id == first.id
    with pytest.raises(cq.AlreadyExists) as info:
        cq.submit("x", key="order-1", conflict="reject")
    assert info.value.key == "order-1"
    second = cq.submit("x", {"n": 3}, key="order-1", conflict="replace")
    assert second.id != first.id
    assert cq.get(first.id).status == "canceled"
    assert cq.get_by_key("order-1").id == second.id
    assert cq.get_by_key("unknown") is None and cq.get_status_by_key("unknown") is None


# ------------------------------------------------------------------ reads
def test_list_filters_and_validation(cairnq_db: Any) -> None:
    a = cq.submit("a", queue="qa")
    b = cq.submit("b", queue="qb")
    assert {t.id for t in cq.list()} == {a.id, b.id}
    assert [t.id for t in cq.list(name="a")] == [a.id]
    assert [t.id for t in cq.list(queue="qb", status="queued")] == [b.id]
    assert cq.list(status="running") == []
    assert len(cq.list(limit=1)) == 1
    with pytest.raises(ValueError, match="status"):
        cq.list(status="done")
    with pytest.raises(ValueError, match="limit"):
        cq.list(limit=-1)
    with pytest.raises(ValueError, match="offset"):
        cq.list(offset=-1)


def test_stats_and_queue_depth(cairnq_db: Any) -> None:
    cq.submit("a", queue="qa")
    cq.submit("a", queue="qa")
    assert cq.stats("qa")["qa"] == {"queued": 2, "running": 0, "succeeded": 0, "failed": 0, "canceled": 0}
    assert cq.stats("empty") == {"empty": dict.fromkeys(["queued", "running", "succeeded", "failed", "canceled"], 0)}
    assert cq.queue_depth("qa", 5) == 3
    assert cq.queue_depth("qa", 1) == 0
    with pytest.raises(ValueError, match="max_depth"):
        cq.queue_depth("qa", -1)


# ------------------------------------------------------------------ cancel / retry / purge
def test_cancel_retry_purge(cairnq_db: Any, store: Any) -> None:
    task = cq.submit("x", queue="crp", key="crp-key")
    canceled = cq.cancel(task.id)
    assert canceled is not None and canceled.status == "canceled" and canceled.canceled
    assert cq.cancel(task.id) is None  # terminal: nothing changes
    again = cq.retry(task.id)
    assert again is not None and again.status == "queued" and again.id == task.id
    fail_permanently(store, "crp", {"type": "E", "code": "e", "message": "m", "retryable": False, "details": {}})
    assert cq.get(task.id).attempt == 1
    reset = cq.retry_by_key("crp-key", reset_attempt=True)
    assert reset is not None and (reset.status, reset.attempt) == ("queued", 0)
    assert cq.retry(task.id) is None  # queued tasks cannot be retried
    assert cq.cancel_by_key("crp-key").status == "canceled"
    time.sleep(0.005)  # purge's cutoff is strict
    with pytest.raises(ValueError, match="status"):
        cq.purge(status="queued")
    with pytest.raises(ValueError, match="limit"):
        cq.purge(limit=0)
    with pytest.raises(ValueError, match="older_than_ms"):
        cq.purge(older_than_ms=-1)
    assert cq.purge(older_than_ms=3_600_000) == []
    assert cq.purge(status="canceled") == [task.id]
    assert cq.get(task.id) is None and cq.get_by_key("crp-key") is None


# ------------------------------------------------------------------ submit_many
def test_submit_many_mixes_pairs_dicts_and_shared_options(cairnq_db: Any, enqueued: list[Any]) -> None:
    rows = cq.submit_many(
        [("a", {"n": 1}), {"name": "b", "payload": {"n": 2}, "queue": "other", "key": "many-k"}, ["c", None]],
        queue="bulk",
        priority=3,
    )
    assert [r.name for r in rows] == ["a", "b", "c"]
    assert [r.queue for r in rows] == ["bulk", "other", "bulk"]
    assert all(r.priority == 3 for r in rows)
    assert rows[2].payload == {}
    assert cq.get_by_key("many-k").id == rows[1].id
    assert [t.id for t in enqueued] == [r.id for r in rows]
    # The same key again reuses the task and announces nothing new.
    again = cq.submit_many([{"name": "b", "key": "many-k"}])
    assert again[0].id == rows[1].id and len(enqueued) == 3
    assert cq.submit_many([]) == []


def test_submit_many_writes_nothing_when_one_item_is_bad(cairnq_db: Any) -> None:
    with pytest.raises(cq.SerializationError):
        cq.submit_many([("a", {}), ("b", {"v": math.nan})])
    with pytest.raises(ValueError, match="name"):
        cq.submit_many([("a", {}), {"payload": {}}])
    with pytest.raises(ValueError):
        cq.submit_many([("a", {}), "just-a-name"])
    with pytest.raises(TypeError):
        cq.submit_many([("a", {})], colour="red")
    # Pairs after the first reuse its validated options; each pair's own name
    # and payload are still checked.
    with pytest.raises(ValueError, match="name"):
        cq.submit_many([("a", {}), ("", {})])
    with pytest.raises(ValueError, match="NUL"):
        cq.submit_many([("a", {}), ("b\x00", {})])
    with pytest.raises(cq.SerializationError):
        cq.submit_many([("a", {}), ("b", {"s": {1, 2}})])
    with pytest.raises(ValueError, match="priority"):
        cq.submit_many([("a", {}), ("b", {})], priority="high")
    assert queued_count() == 0


# ------------------------------------------------------------------ transactions and signals
def test_submit_commits_with_the_callers_transaction(cairnq_db: Any, enqueued: list[Any]) -> None:
    with transaction.atomic():
        User.objects.create(username="committed")
        task = cq.submit("welcome.email", {"user": "committed"}, key="welcome:committed")
        assert enqueued == []  # announced only once the task is visible to others
    assert [t.id for t in enqueued] == [task.id]
    assert User.objects.filter(username="committed").exists()
    assert cq.get(task.id) is not None and cq.get_by_key("welcome:committed").id == task.id


def test_submit_rolls_back_with_the_callers_transaction(cairnq_db: Any, enqueued: list[Any]) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        User.objects.create(username="rolled-back")
        plain = cq.submit("welcome.email", {"user": "rolled-back"})
        keyed = cq.submit("welcome.email", key="welcome:rolled-back")
        raise RuntimeError("abort")
    assert not User.objects.filter(username="rolled-back").exists()
    assert cq.get(plain.id) is None and cq.get(keyed.id) is None
    assert cq.get_by_key("welcome:rolled-back") is None
    assert enqueued == []
    assert queued_count() == 0


def test_signal_is_sent_once_per_inserted_task(cairnq_db: Any, enqueued: list[Any]) -> None:
    first = cq.submit("x", key="sig")
    cq.submit("x", key="sig")  # reuse: nothing new
    assert [t.id for t in enqueued] == [first.id]
    assert isinstance(enqueued[0], cq.Task)
    replaced = cq.submit("x", key="sig", conflict="replace")
    plain = cq.submit("x")
    assert [t.id for t in enqueued] == [first.id, replaced.id, plain.id]
    # One key twice in a batch: one task, announced once.
    pair = cq.submit_many([{"name": "x", "key": "dup"}, {"name": "x", "key": "dup"}])
    assert pair[0].id == pair[1].id
    assert [t.id for t in enqueued][3:] == [pair[0].id]
    # A reuse after the key's task was canceled inserts (and announces) a new task.
    cq.cancel(pair[0].id)
    fresh = cq.submit("x", key="dup")
    assert fresh.id != pair[0].id and enqueued[-1].id == fresh.id


# ------------------------------------------------------------------ wait
def test_next_interval_grows_by_half_to_the_cap() -> None:
    seq = [100]
    for _ in range(6):
        seq.append(_wait.next_interval(seq[-1], 500))
    assert seq == [100, 150, 225, 337, 500, 500, 500]
    assert _wait.next_interval(1, 500) == 2 and _wait.next_interval(2, 500) == 3


def test_wait_times_out_with_a_snapshot_and_leaves_the_task(cairnq_db: Any) -> None:
    task = cq.submit("slow")
    started = time.monotonic()
    with pytest.raises(cq.TaskTimeout) as info:
        cq.wait(task.id, timeout=0.3, poll_ms=20)
    assert 0.25 <= time.monotonic() - started < 2
    assert info.value.task_id == task.id
    assert info.value.snapshot is not None and info.value.snapshot.status == "queued"
    assert cq.get(task.id).status == "queued"


def test_wait_returns_the_terminal_row(cairnq_db: Any, store: Any) -> None:
    task = cq.submit("w", queue="waitq")
    worker = Later(0.2, lambda: finish(store, "waitq", {"answer": 42}))
    done = cq.wait(task.id, timeout=10, poll_ms=10, max_poll_ms=50)
    worker.join()
    assert done.status == "succeeded" and done.succeeded and done.result == {"answer": 42}


def test_wait_rejects_bad_intervals(cairnq_db: Any) -> None:
    with pytest.raises(ValueError, match="poll_ms"):
        cq.wait("task_x", poll_ms=0)
    with pytest.raises(ValueError, match="timeout"):
        cq.wait("task_x", timeout=-1)


def test_wait_by_key_waits_for_the_key_to_appear(cairnq_db: Any, store: Any) -> None:
    with pytest.raises(cq.TaskTimeout) as info:
        cq.wait_by_key("not-yet", timeout=0.1, poll_ms=20)
    assert info.value.key == "not-yet" and info.value.task_id is None

    def produce() -> str:
        cq.submit("k", key="later-key", queue="keyq")
        return finish(store, "keyq", "done")

    worker = Later(0.2, produce)
    done = cq.wait_by_key("later-key", timeout=10, poll_ms=10)
    assert done.id == worker.join() and done.result == "done"


# ------------------------------------------------------------------ call
def test_call_returns_the_result(cairnq_db: Any, store: Any) -> None:
    worker = Later(0.1, lambda: finish(store, "callq", [1, 2, 3]))
    assert cq.call("sum", {"xs": [1]}, queue="callq", timeout=10, poll_ms=10) == [1, 2, 3]
    worker.join()


def test_call_raises_task_failed_with_the_envelope(cairnq_db: Any, store: Any) -> None:
    envelope = {"type": "ValueError", "code": "handler_error", "message": "bad input",
                "retryable": False, "details": {"field": "n"}}
    worker = Later(0.1, lambda: fail_permanently(store, "failq", envelope))
    with pytest.raises(cq.TaskFailed) as info:
        cq.call("parse", {}, queue="failq", timeout=10, poll_ms=10)
    task_id = worker.join()
    error = info.value
    assert error.task_id == task_id
    assert (error.type, error.code, error.message, error.retryable, error.details) == (
        "ValueError", "handler_error", "bad input", False, {"field": "n"})
    assert error.envelope == envelope


def test_call_raises_task_canceled(cairnq_db: Any) -> None:
    def cancel_it() -> None:
        (task,) = cq.list(queue="cancelq")
        cq.cancel(task.id)

    worker = Later(0.1, cancel_it)
    with pytest.raises(cq.TaskCanceled):
        cq.call("x", {}, queue="cancelq", timeout=10, poll_ms=10)
    worker.join()


def test_call_timeout_leaves_the_task_queued(cairnq_db: Any) -> None:
    with pytest.raises(cq.TaskTimeout) as info:
        cq.call("x", {}, timeout=0.1, poll_ms=20)
    assert cq.get(info.value.task_id).status == "queued"


# ------------------------------------------------------------------ backpressure
def gate_settings(config: dict[str, Any]) -> Any:
    """The project's CAIRNQ with ``config`` laid over it (a pooled run keeps its pooling settings)."""
    return override_settings(CAIRNQ={**settings.CAIRNQ, "UNKNOWN_TASKS": "allow", **config})


def test_full_queue_raises_queue_full_after_waiting(cairnq_db: Any) -> None:
    with gate_settings({"MAX_QUEUE_DEPTH": {"gated": 2}, "MAX_QUEUE_WAIT_MS": 400}):
        cq.submit("x", queue="gated")
        cq.submit("x", queue="gated")
        started = time.monotonic()
        with pytest.raises(cq.QueueFull) as info:
            cq.submit("x", queue="gated")
        waited = time.monotonic() - started
        assert 0.35 <= waited < 3
        assert info.value.queue == "gated" and info.value.waited_ms >= 400
        assert queued_count("gated") == 2
        # A queue the mapping does not name is not gated.
        for _ in range(5):
            cq.submit("x", queue="free")


def test_validation_runs_before_the_gate(cairnq_db: Any) -> None:
    with gate_settings({"MAX_QUEUE_DEPTH": 1, "MAX_QUEUE_WAIT_MS": 5_000}):
        cq.submit("x")
        started = time.monotonic()
        with pytest.raises(ValueError, match="conflict"):
            cq.submit("x", conflict="bogus")
        with pytest.raises(cq.SerializationError):
            cq.submit("x", {"v": math.inf})
        assert time.monotonic() - started < 1


def test_gated_submit_proceeds_when_headroom_appears(cairnq_db: Any, store: Any) -> None:
    with gate_settings({"MAX_QUEUE_DEPTH": 1, "MAX_QUEUE_WAIT_MS": 10_000}):
        cq.submit("x", queue="drain")
        worker = Later(0.4, lambda: claim_one(store, "drain"))
        started = time.monotonic()
        second = cq.submit("x", queue="drain")
        assert time.monotonic() - started >= 0.3
        worker.join()
        assert second.status == "queued"


def test_one_probe_serves_up_to_64_submits(cairnq_db: Any) -> None:
    with gate_settings({"MAX_QUEUE_DEPTH": 1000}):
        for _ in range(64):
            cq.submit("x", queue="grant")
        assert backpressure.gate.probes("default", "grant") == 1
        cq.submit("x", queue="grant")
        assert backpressure.gate.probes("default", "grant") == 2


def test_concurrent_submits_share_one_probe(cairnq_db: Any) -> None:
    with gate_settings({"MAX_QUEUE_DEPTH": 1000}):
        barrier = threading.Barrier(8)

        def submit() -> str:
            barrier.wait(5)
            return cq.submit("x", queue="shared").id

        workers = [Later(0, submit) for _ in range(8)]
        ids = {w.join() for w in workers}
        assert len(ids) == 8
        assert backpressure.gate.probes("default", "shared") == 1
        assert queued_count("shared") == 8


def test_invalid_depth_limit_is_refused_at_submit(cairnq_db: Any) -> None:
    with gate_settings({"MAX_QUEUE_DEPTH": 0}), pytest.raises(ImproperlyConfigured):
        cq.submit("x")
    assert queued_count() == 0
