"""The protocol's conformance checklist (cairnq-protocol-v1.md section 5), one
test per line, run against the real store of whichever dialect the test
database uses.

Pins: any store operation drifting from the semantics every upstream SDK
implements (status transitions, cancel-wins, key strategies, claim order,
ownership, lease invariant, purge/stats/queue_depth shapes).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from cairnq_django.protocol import payload
from cairnq_django.exceptions import AlreadyExists, LostLease
from cairnq_django.models import Task
from cairnq_django.store.base import Store, SubmitSpec

ENVELOPE = {"type": "Boom", "code": "handler_error", "message": "boom", "retryable": True, "details": {}}


def submit(store: Store, name: str = "job", payload_value: Any = None, **kwargs: Any) -> Task:
    spec = SubmitSpec(name=name, payload_json=payload.encode_object(payload_value), **kwargs)
    return store.submit(spec)


def claim_one(store: Store, worker: str = "w1", queue: str = "default", **kwargs: Any) -> Task:
    rows = store.claim([queue], worker, **kwargs)
    assert len(rows) == 1, rows
    return rows[0]


def fresh(store: Store, task: Task) -> Task:
    row = store.get(task.id)
    assert row is not None
    return row


def test_basic_submit_get(store: Store) -> None:
    task = submit(store, "send_email", {"to": "a@example.com"})
    assert task.status == "queued"
    assert task.name == "send_email"
    assert task.attempt == 0 and task.root_id == task.id and task.id.startswith("task_")
    got = store.get(task.id)
    assert got is not None
    assert (got.id, got.name, got.status, got.payload) == (task.id, "send_email", "queued", {"to": "a@example.com"})
    assert store.get("task_missing") is None


def test_cancel(store: Store) -> None:
    queued = submit(store)
    canceled = store.cancel(queued.id)
    assert canceled is not None and canceled.status == "canceled"
    assert canceled.completed_at_ms is not None
    running = submit(store, priority=1)
    claimed = claim_one(store)
    assert claimed.id == running.id
    requested = store.cancel(running.id)
    assert requested is not None and requested.status == "running"
    assert requested.cancel_requested_at_ms is not None and requested.completed_at_ms is None
    # Terminal rows are left alone.
    assert store.cancel(queued.id) is None


def test_cancel_by_key(store: Store) -> None:
    task = submit(store, key="order-1")
    canceled = store.cancel_by_key("order-1")
    assert canceled is not None and canceled.id == task.id and canceled.status == "canceled"
    assert store.cancel_by_key("no-such-key") is None


def test_cancel_running_finalizes(store: Store) -> None:
    task = submit(store)
    claim_one(store)
    store.cancel(task.id)
    done = store.complete(task.id, "w1", payload.encode({"ok": True}))
    assert done.status == "canceled"
    assert done.result is None and done.completed_at_ms is not None


def test_cancel_then_fail_finalizes_canceled(store: Store) -> None:
    task = submit(store, max_attempts=5)
    claim_one(store)
    store.cancel(task.id)
    failed = store.fail(task.id, "w1", ENVELOPE, retryable=True)
    assert failed.status == "canceled"
    assert failed.error == ENVELOPE and failed.completed_at_ms is not None
    assert failed.attempt == 1
    assert store.claim(["default"], "w2") == []


def test_cancel_then_lease_expiry_finalizes_canceled(store: Store) -> None:
    task = submit(store, max_attempts=5)
    claim_one(store, lease_ms=150)
    store.cancel(task.id)
    time.sleep(0.3)
    assert store.claim(["default"], "w2") == []
    row = fresh(store, task)
    assert row.status == "canceled" and row.completed_at_ms is not None
    assert row.error is None and row.attempt == 1 and row.lease_until_ms is None


def test_claim_filters_by_handler_name(store: Store) -> None:
    a = submit(store, "a")
    b = submit(store, "b")
    taken = store.claim(["default"], "w1", limit=5, names=["a"])
    assert [t.id for t in taken] == [a.id]
    other = fresh(store, b)
    assert other.status == "queued" and other.attempt == 0
    assert store.claim(["default"], "w1", limit=5, names=[]) == []
    assert [t.id for t in store.claim(["default"], "w1", limit=5)] == [b.id]


def test_claim_succeed(store: Store) -> None:
    task = submit(store)
    claimed = claim_one(store)
    assert (claimed.id, claimed.status, claimed.worker_id, claimed.attempt) == (task.id, "running", "w1", 1)
    store.progress(task.id, "w1", 0.5, "half")
    done = store.succeed(task.id, "w1", payload.encode(7))
    assert done.status == "succeeded" and done.progress == 1.0 and done.result == 7


@pytest.mark.parametrize("queues", [["q1"], ["q1", "q2"]], ids=["one_queue", "several_queues"])
@pytest.mark.parametrize("names", [None, ["job"], ["job", "job2"]], ids=["any_name", "one_name", "two_names"])
def test_claim_variants_agree(store: Store, queues: list[str], names: list[str] | None) -> None:
    expected = []
    # Distinct priorities so same-millisecond submits still have one order.
    for priority in (1, 5, 3, 4, 2):
        queue = queues[priority % len(queues)]
        name = "job2" if names and len(names) == 2 and priority == 3 else "job"
        expected.append((priority, submit(store, name, queue=queue, priority=priority).id))
    if names is not None:
        submit(store, "other", queue=queues[0], priority=99)  # must be ignored
    submit(store, "job", queue="elsewhere", priority=100)  # not a watched queue
    order = [task_id for _, task_id in sorted(expected, reverse=True)]
    got = []
    for _ in order:
        rows = store.claim(queues, "w1", limit=1, names=names)
        assert len(rows) == 1
        got.append(rows[0].id)
    assert got == order
    assert store.claim(queues, "w1", limit=1, names=names) == []


def test_complete_ownership(store: Store) -> None:
    task = submit(store)
    claim_one(store, "w1")
    with pytest.raises(LostLease) as caught:
        store.complete(task.id, "w2", None)
    assert caught.value.task_id == task.id
    row = fresh(store, task)
    assert row.status == "running" and row.worker_id == "w1"


def test_complete_success(store: Store) -> None:
    task = submit(store)
    claim_one(store)
    done = store.complete(task.id, "w1", payload.encode({"n": 1}))
    assert done.status == "succeeded" and done.progress == 1.0 and done.result == {"n": 1}
    assert fresh(store, task).result == {"n": 1}


def test_crash_recovery(store: Store) -> None:
    task = submit(store)
    claim_one(store, "w1", lease_ms=150)
    time.sleep(0.3)
    again = claim_one(store, "w2")
    assert again.id == task.id and again.attempt == 2 and again.worker_id == "w2"


def test_final_failure(store: Store) -> None:
    task = submit(store, max_attempts=1)
    claim_one(store)
    failed = store.fail(task.id, "w1", ENVELOPE, retryable=True)
    assert failed.status == "failed" and failed.error == ENVELOPE
    assert failed.completed_at_ms is not None and failed.lease_until_ms is None


def test_heartbeat_batch_renews_per_row(store: Store) -> None:
    tasks = [submit(store, priority=p) for p in (4, 3, 2, 1)]
    a, b, c, d = tasks
    claimed = store.claim(["default"], "w1", limit=4, lease_ms=10_000)
    assert {t.id for t in claimed} == {t.id for t in tasks}
    store.cancel(b.id)
    store.complete(c.id, "w1", None)
    d_lease = fresh(store, d).lease_until_ms
    time.sleep(0.005)
    beats = store.heartbeat_batch([a.id, b.id, c.id], "w1", 60_000)
    assert set(beats) == {a.id, b.id}
    assert beats[a.id] is None and beats[b.id] == fresh(store, b).cancel_requested_at_ms
    assert fresh(store, a).lease_until_ms > d_lease  # type: ignore[operator]
    assert fresh(store, d).lease_until_ms == d_lease  # not listed: untouched
    assert store.heartbeat_batch([a.id], "w2", 60_000) == {}
    assert store.heartbeat_batch([], "w1", 60_000) == {}


def test_heartbeat_extends_lease(store: Store) -> None:
    task = submit(store)
    claimed = claim_one(store, lease_ms=1_000)
    time.sleep(0.005)
    beat = store.heartbeat(task.id, "w1", 60_000)
    assert beat.status == "running" and beat.id == task.id
    assert beat.lease_until_ms > claimed.lease_until_ms  # type: ignore[operator]


def test_json_roundtrip(store: Store) -> None:
    value = {
        "none": None,
        "nested": {"list": [1, 2.5, {"deep": [None, True, False]}], "empty_obj": {}, "empty_list": []},
        "text": "héllo wörld ✓ 日本語 😀",
        "quote": "it's \"quoted\" \\ back",
        "top_string": "42",
    }
    task = submit(store, payload_value=value)
    assert fresh(store, task).payload == value
    claim_one(store)
    done = store.complete(task.id, "w1", payload.encode([value, None, [], {}]))
    assert done.result == [value, None, [], {}]
    assert fresh(store, task).result == [value, None, [], {}]


def test_key_reject(store: Store) -> None:
    submit(store, key="k")
    with pytest.raises(AlreadyExists) as caught:
        submit(store, key="k", conflict="reject")
    assert caught.value.key == "k"


def test_key_replace(store: Store) -> None:
    first = submit(store, key="k")
    second = submit(store, key="k", conflict="replace")
    assert second.id != first.id and second.status == "queued"
    assert fresh(store, first).status == "canceled"
    current = store.get_by_key("k")
    assert current is not None and current.id == second.id


def test_key_reuse(store: Store) -> None:
    first = submit(store, key="k", payload_value={"v": 1})
    again = submit(store, "other_name", {"v": 2}, key="k", conflict="reuse")
    assert again.id == first.id and again.payload == {"v": 1} and again.name == "job"


def test_key_reuse_after_purge(store: Store) -> None:
    first = submit(store, key="k")
    claim_one(store)
    store.complete(first.id, "w1", None)
    time.sleep(0.005)
    assert store.purge(older_than_ms=0) == [first.id]
    again = submit(store, key="k", conflict="reuse")
    assert again.id != first.id and again.status == "queued"
    assert store.get_by_key("k").id == again.id  # type: ignore[union-attr]


def test_key_reuse_failed(store: Store) -> None:
    first = submit(store, key="k", max_attempts=1)
    claim_one(store)
    store.fail(first.id, "w1", ENVELOPE)
    second = submit(store, key="k", conflict="reuse", max_attempts=1)
    assert second.id != first.id and second.status == "queued"
    assert store.get_by_key("k").id == second.id  # type: ignore[union-attr]
    claim_one(store)
    store.fail(second.id, "w1", ENVELOPE)
    third = submit(store, key="k", conflict="reuse-succeeded")
    assert third.id not in (first.id, second.id) and third.status == "queued"
    assert store.get_by_key("k").id == third.id  # type: ignore[union-attr]


def test_key_reuse_succeeded(store: Store) -> None:
    first = submit(store, key="k")
    claim_one(store)
    in_flight = submit(store, key="k", conflict="reuse-succeeded")
    assert in_flight.id == first.id and in_flight.status == "running"
    store.complete(first.id, "w1", payload.encode({"answer": 42}))
    done = submit(store, key="k", conflict="reuse-succeeded")
    assert done.id == first.id and done.status == "succeeded" and done.result == {"answer": 42}


def test_key_reuse_terminal(store: Store) -> None:
    first = submit(store, key="k")
    claim_one(store)
    store.complete(first.id, "w1", payload.encode("r"))
    before = fresh(store, first)
    second = submit(store, key="k", conflict="reuse")
    assert second.id != first.id and second.status == "queued"
    assert store.get_by_key("k").id == second.id  # type: ignore[union-attr]
    after = fresh(store, first)
    fields = [f.attname for f in Task._meta.concrete_fields]
    assert [getattr(after, f) for f in fields] == [getattr(before, f) for f in fields]


def test_list_filters(store: Store) -> None:
    a = submit(store, "alpha", queue="qa", correlation_id="corr-a")
    b = submit(store, "beta", queue="qb", correlation_id="corr-b")
    assert [t.id for t in store.list(name="alpha")] == [a.id]
    assert [t.id for t in store.list(queue="qb")] == [b.id]
    assert [t.id for t in store.list(correlation_id="corr-a")] == [a.id]
    assert [t.id for t in store.list(root_id=b.id)] == [b.id]
    assert [t.id for t in store.list(status="queued", name="beta")] == [b.id]
    assert {t.id for t in store.list()} == {a.id, b.id}
    with pytest.raises(ValueError, match="status"):
        store.list(status="done")
    with pytest.raises(ValueError, match="limit"):
        store.list(limit=-1)
    with pytest.raises(ValueError, match="offset"):
        store.list(offset=-1)


def test_progress_message_only_keeps_value(store: Store) -> None:
    task = submit(store)
    claim_one(store)
    store.progress(task.id, "w1", 0.25, "start")
    row = store.progress(task.id, "w1", None, "still going")
    assert (row.progress, row.message) == (0.25, "still going")
    row = store.progress(task.id, "w1", 0.75, None)
    assert (row.progress, row.message) == (0.75, "still going")
    with pytest.raises(LostLease):
        store.progress(task.id, "w2", 0.9, None)


def _finish(store: Store, task: Task, outcome: str) -> None:
    rows = store.claim([task.queue], "w1", names=[task.name])
    assert [r.id for r in rows] == [task.id]
    if outcome == "succeeded":
        store.complete(task.id, "w1", None)
    else:
        store.fail(task.id, "w1", ENVELOPE, retryable=False)


def test_purge_filters(store: Store) -> None:
    ok = submit(store, "a")
    _finish(store, ok, "succeeded")
    bad = submit(store, "a")
    _finish(store, bad, "failed")
    other = submit(store, "b")
    _finish(store, other, "succeeded")
    live = submit(store, "b")
    time.sleep(0.005)
    assert store.purge(status="failed") == [bad.id]
    assert store.purge(name="b") == [other.id]
    assert store.purge() == [ok.id]
    assert fresh(store, live).status == "queued"
    with pytest.raises(ValueError, match="status"):
        store.purge(status="queued")
    with pytest.raises(ValueError, match="older_than_ms"):
        store.purge(older_than_ms=-1)
    with pytest.raises(ValueError, match="limit"):
        store.purge(limit=0)


def test_purge_queue_filter(store: Store) -> None:
    q1_ok = submit(store, "a", queue="q1")
    _finish(store, q1_ok, "succeeded")
    q1_bad = submit(store, "a", queue="q1")
    _finish(store, q1_bad, "failed")
    q2_ok = submit(store, "a", queue="q2")
    _finish(store, q2_ok, "succeeded")
    time.sleep(0.005)
    assert store.purge(queue="nowhere") == []
    assert store.purge(queue="q1", status="failed") == [q1_bad.id]
    assert store.purge(queue="q1") == [q1_ok.id]
    assert fresh(store, q2_ok).status == "succeeded"


def test_purge_terminal_tasks(store: Store) -> None:
    done = submit(store, key="done-key")
    _finish(store, done, "succeeded")
    live = submit(store, key="live-key")
    running = submit(store, "r")
    store.claim(["default"], "w1", names=["r"])
    time.sleep(0.005)
    assert store.purge(older_than_ms=0) == [done.id]
    assert store.get(done.id) is None and store.get_by_key("done-key") is None
    assert store.get_by_key("live-key").id == live.id  # type: ignore[union-attr]
    assert fresh(store, running).status == "running"
    other = submit(store, priority=10)
    _finish(store, other, "succeeded")
    assert store.purge(older_than_ms=3_600_000) == []


def test_queue_depth(store: Store) -> None:
    assert store.queue_depth("q", 3) == 3
    submit(store, queue="q")
    submit(store, queue="q", delay_ms=60_000)  # delayed rows still count
    submit(store, queue="other")
    assert store.queue_depth("q", 3) == 1
    assert store.queue_depth("q", 1) == 0  # floored at zero
    store.claim(["q"], "w1")
    assert store.queue_depth("q", 3) == 2  # claimed rows stop counting
    assert store.queue_depth("q", 0) == 0
    with pytest.raises(ValueError, match="max_depth"):
        store.queue_depth("q", -1)


def test_requeue_resets_progress(store: Store) -> None:
    # Retryable fail.
    task = submit(store, max_attempts=5)
    claim_one(store)
    store.progress(task.id, "w1", 0.5, "half")
    row = store.fail(task.id, "w1", ENVELOPE, retryable=True)
    assert row.status == "queued" and (row.progress, row.message) == (None, None)
    # Lease recovery.
    claim_one(store, lease_ms=150)
    store.progress(task.id, "w1", 0.5, "half")
    time.sleep(0.3)
    assert store.recover_leases() == 1
    row = fresh(store, task)
    assert row.status == "queued" and (row.progress, row.message) == (None, None)
    # Permanent failure keeps them; manual retry clears them.
    claim_one(store)
    store.progress(task.id, "w1", 0.5, "half")
    row = store.fail(task.id, "w1", ENVELOPE, retryable=False)
    assert row.status == "failed" and (row.progress, row.message) == (0.5, "half")
    row = store.retry(task.id)  # type: ignore[assignment]
    assert row.status == "queued" and (row.progress, row.message) == (None, None)


def test_retry(store: Store) -> None:
    task = submit(store, max_attempts=3)
    claim_one(store)
    row = store.fail(task.id, "w1", ENVELOPE, retryable=True, delay_ms=0)
    assert row.status == "queued" and row.attempt == 1 and row.worker_id is None
    assert row.completed_at_ms is None and row.error == ENVELOPE
    # Manual retry only acts on failed/canceled rows.
    assert store.retry(task.id) is None


def test_retry_by_key(store: Store) -> None:
    task = submit(store, key="k", max_attempts=1)
    claim_one(store)
    store.fail(task.id, "w1", ENVELOPE)
    again = store.retry_by_key("k")
    assert again is not None and again.id == task.id and again.status == "queued" and again.attempt == 1
    assert again.error is None and again.completed_at_ms is None
    claim_one(store)
    store.fail(task.id, "w1", ENVELOPE)
    reset = store.retry_by_key("k", reset_attempt=True)
    assert reset is not None and reset.id == task.id and reset.attempt == 0
    assert store.retry_by_key("unknown") is None


def test_stats(store: Store) -> None:
    zeros = {"queued": 0, "running": 0, "succeeded": 0, "failed": 0, "canceled": 0}
    submit(store, queue="qa")
    submit(store, queue="qa")
    store.cancel(submit(store, queue="qb").id)
    assert store.stats() == {"qa": {**zeros, "queued": 2}, "qb": {**zeros, "canceled": 1}}
    assert store.stats("qa") == {"qa": {**zeros, "queued": 2}}
    assert store.stats("empty") == {"empty": zeros}


def test_status_probe(store: Store) -> None:
    first = submit(store, key="k")
    assert store.get_status(first.id) == (first.id, "queued")
    assert store.get_status_by_key("k") == (first.id, "queued")
    second = submit(store, key="k", conflict="replace")
    assert store.get_status_by_key("k") == (second.id, "queued")
    assert store.get_status(first.id) == (first.id, "canceled")
    assert store.get_status("task_nope") is None and store.get_status_by_key("nope") is None


def test_terminal_clears_lease(store: Store) -> None:
    def claimed(**kwargs: Any) -> Task:
        task = submit(store, **kwargs)
        rows = store.claim(["default"], "w1")
        assert [r.id for r in rows] == [task.id] and rows[0].lease_until_ms is not None
        return task

    ends = []
    t = claimed()
    ends.append(store.succeed(t.id, "w1", None))
    t = claimed()
    ends.append(store.complete(t.id, "w1", None))
    t = claimed()
    store.cancel(t.id)
    ends.append(store.complete(t.id, "w1", None))
    t = claimed()
    store.cancel(t.id)
    ends.append(store.fail(t.id, "w1", ENVELOPE))
    t = claimed(max_attempts=3)
    ends.append(store.fail(t.id, "w1", ENVELOPE, retryable=True))
    store.cancel(t.id)  # take it out of the way of the next claims
    t = claimed(max_attempts=1)
    ends.append(store.fail(t.id, "w1", ENVELOPE, retryable=True))
    assert [e.status for e in ends] == ["succeeded", "succeeded", "canceled", "canceled", "queued", "failed"]
    assert all(e.lease_until_ms is None for e in ends)
    # Recovery to failed: last attempt, lease expired.
    task = submit(store, max_attempts=1)
    store.claim(["default"], "w1", lease_ms=150)
    time.sleep(0.3)
    store.recover_leases()
    row = fresh(store, task)
    assert row.status == "failed" and row.lease_until_ms is None
    assert row.error["code"] == "lease_expired" and row.error["retryable"] is False
    assert row.worker_id == "w1"
