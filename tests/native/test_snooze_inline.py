"""Pin ``cairnq.Snooze`` through the pipeline the worker and ``run_until_idle`` share, inline:
a snoozed task goes back to ``queued`` at now + ``delay_ms`` with its attempt handed back, so
``max_attempts`` bounds only attempts that ended (a ``max_attempts=1`` task snoozed five
times still runs a sixth time and succeeds), from sync and async handlers, as one batch
item's value and raised for a whole batch; a task not yet due is not run again (no spin);
a cancel requested during the handler wins; ``task_snoozed`` is sent instead of
``task_finished`` (and a Django task that snoozes sends no Django ``task_finished``); a
bad ``delay_ms`` is refused when the ``Snooze`` is built."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

import cairnq_django as cq
from cairnq_django import signals
from cairnq_django.protocol.bounds import MAX_DELAY_MS
from cairnq_django.testing import NotIdle, run_until_idle
from tests.conftest import clear_queue

HOUR_MS = 3_600_000


@pytest.fixture
def in_test_transaction(db: Any) -> None:
    """A non-transactional test: everything below is rolled back at the end."""
    assert connection.in_atomic_block
    clear_queue()


@pytest.fixture
def heard() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every task_snoozed and task_finished sent while the test runs, in order."""
    events: list[tuple[str, dict[str, Any]]] = []

    def snoozed(sender: Any, **kwargs: Any) -> None:
        events.append(("snoozed", kwargs))

    def finished(sender: Any, **kwargs: Any) -> None:
        events.append(("finished", kwargs))

    signals.task_snoozed.connect(snoozed)
    signals.task_finished.connect(finished)
    try:
        yield events
    finally:
        signals.task_snoozed.disconnect(snoozed)
        signals.task_finished.disconnect(finished)


@pytest.mark.parametrize("bad", [-1, MAX_DELAY_MS + 1, 2.5, True, "1000", None])
def test_a_bad_delay_is_refused_when_the_snooze_is_built(bad: Any) -> None:
    with pytest.raises(ValueError, match="delay_ms"):
        cq.Snooze(delay_ms=bad)


def test_the_delay_is_submits_rule() -> None:
    assert cq.Snooze(delay_ms=0).delay_ms == 0
    assert cq.Snooze(MAX_DELAY_MS).delay_ms == MAX_DELAY_MS
    assert repr(cq.Snooze(delay_ms=30_000)) == "Snooze(delay_ms=30000)"


@pytest.mark.parametrize("name", ["demo.snooze", "demo.async_snooze"])
def test_snoozes_are_not_attempts(in_test_transaction: None, heard: list[Any], name: str) -> None:
    task = cq.submit(name, {"times": 5, "delay_ms": 0}, max_attempts=1)
    rows = run_until_idle(names=[name])
    # Every run's row: five snoozes, each queued again with the attempt handed back, then the sixth.
    assert [(row.status, row.attempt) for row in rows] == [("queued", 0)] * 5 + [("succeeded", 1)]
    row = cq.get(task.id)
    assert (row.status, row.attempt, row.result) == ("succeeded", 1, {"attempt": 1, "runs": 6})
    assert [kind for kind, _ in heard] == ["snoozed"] * 5 + ["finished"]
    assert all(event["attempt"] == 1 and event["delay_ms"] == 0 for _, event in heard[:5])
    assert heard[-1][1]["status"] == "succeeded"


def test_a_task_not_due_yet_stays_queued_and_is_not_run_again(in_test_transaction: None, heard: list[Any]) -> None:
    task = cq.submit("demo.snooze", {"times": 1, "delay_ms": HOUR_MS}, max_attempts=1)
    before = cq.get(task.id).run_at_ms
    (row,) = run_until_idle(names=["demo.snooze"])
    assert (row.id, row.status, row.attempt, row.worker_id, row.lease_until_ms) == (task.id, "queued", 0, None, None)
    # About an hour after the submit: inside this test's transaction PostgreSQL's
    # settlement clock, now(), is the transaction's start, a moment before the submit.
    assert HOUR_MS - 5_000 <= row.run_at_ms - before <= HOUR_MS + 5_000
    assert row.error is None and row.completed_at_ms is None
    assert run_until_idle(names=["demo.snooze"]) == []
    ((kind, event),) = heard
    assert (kind, event["task_id"], event["delay_ms"], event["worker_id"]) == ("snoozed", task.id, HOUR_MS, "worker_inline")


def test_a_snooze_after_a_failure_keeps_the_failures_count(in_test_transaction: None) -> None:
    # Attempt 1 fails (counted); attempt 2 snoozes (handed back); attempt 2 then runs and succeeds.
    flaky = cq.submit("demo.flaky", {"fail_times": 1}, max_attempts=2)
    run_until_idle(names=["demo.flaky"])
    assert cq.get(flaky.id).attempt == 2
    task = cq.submit("demo.snooze", {"times": 2, "delay_ms": 0}, max_attempts=1)
    run_until_idle(names=["demo.snooze"])
    assert (cq.get(task.id).status, cq.get(task.id).attempt) == ("succeeded", 1)


def test_a_task_that_always_snoozes_at_once_is_not_idle(in_test_transaction: None) -> None:
    cq.submit("demo.snooze", {"times": 10**6, "delay_ms": 0})
    with pytest.raises(NotIdle):
        run_until_idle(names=["demo.snooze"], max_tasks=5)


def test_one_batch_item_snoozes_alone(in_test_transaction: None) -> None:
    snoozed = cq.submit("demo.snooze_batch", {"snooze_ms": HOUR_MS})
    plain = [cq.submit("demo.snooze_batch", {}) for _ in range(2)]
    rows = run_until_idle(names=["demo.snooze_batch"])
    assert sorted(row.id for row in rows) == sorted([snoozed.id, *(t.id for t in plain)])
    row = cq.get(snoozed.id)
    assert (row.status, row.attempt, row.result) == ("queued", 0, None)
    assert [(cq.get(t.id).status, cq.get(t.id).result) for t in plain] == [("succeeded", {"attempt": 1, "runs": 1})] * 2


def test_a_raised_snooze_snoozes_the_whole_batch(in_test_transaction: None, heard: list[Any]) -> None:
    raiser = cq.submit("demo.snooze_batch", {"raise_ms": 0}, max_attempts=1)
    others = [cq.submit("demo.snooze_batch", {}, max_attempts=1) for _ in range(2)]
    run_until_idle(names=["demo.snooze_batch"])
    # One call of three snoozed together, then one call of three that returned.
    for task in (raiser, *others):
        row = cq.get(task.id)
        assert (row.status, row.attempt, row.result) == ("succeeded", 1, {"attempt": 1, "runs": 2})
    assert [kind for kind, _ in heard] == ["snoozed"] * 3 + ["finished"] * 3


def test_a_cancel_requested_during_the_handler_wins(in_test_transaction: None, heard: list[Any]) -> None:
    task = cq.submit("demo.snooze", {"times": 1, "delay_ms": 0, "cancel_self": True})
    (row,) = run_until_idle(names=["demo.snooze"])
    assert (row.status, row.attempt, row.worker_id) == ("canceled", 1, "worker_inline")
    assert row.completed_at_ms is not None and row.lease_until_ms is None
    ((kind, event),) = heard
    assert (kind, event["task_id"], event["status"]) == ("finished", task.id, "canceled")


def test_a_django_task_snoozes_without_finishing(in_test_transaction: None) -> None:
    backends = pytest.importorskip("cairnq_django.backends")
    from testproject.native import tasks

    finished: list[Any] = []

    def record(sender: Any, task_result: Any, **kwargs: Any) -> None:
        finished.append(task_result.status)

    backends.task_finished.connect(record)
    try:
        result = tasks.snooze_once.enqueue(0)
        run_until_idle()
    finally:
        backends.task_finished.disconnect(record)
    final = tasks.snooze_once.get_result(result.id)
    assert (final.status, final.return_value) == (backends.TaskResultStatus.SUCCESSFUL, 1)
    assert finished == [backends.TaskResultStatus.SUCCESSFUL]
