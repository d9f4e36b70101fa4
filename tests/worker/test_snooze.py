"""Pin ``cairnq.Snooze`` in a real ``cairnq_worker`` process: a snoozed task starts again when
its delay is up -- not before, and not at the next poll (a 5 s poll interval) -- as the same
attempt; ``max_attempts=1`` tasks snoozed five times (sync, async) still run a sixth time
and succeed; one batch item's ``Snooze`` value snoozes it alone and a raised one the whole
call; a cancel requested while the handler runs wins over its snooze; a snooze written
after the lease was lost changes nothing and is reported as a lost lease."""

from __future__ import annotations

import time
from typing import Any

import pytest

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

LONG_POLL = {"POLL_INTERVAL_MS": 5000}


def _events(ledger: Any, task_id: str, kind: str = "start") -> list[dict[str, Any]]:
    return [e for e in ledger() if e["event"] == kind and e.get("task_id") == task_id]


def _row(task_id: str) -> Task:
    return Task.objects.get(id=task_id)


def test_a_snoozed_task_comes_back_after_its_delay_not_before(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    worker = start_worker("--task", "demo.snooze", overrides=LONG_POLL)
    worker.wait_ready()
    time.sleep(0.5)  # past its first empty claim, into the long idle wait
    task_id = cq.submit("demo.snooze", {"times": 1, "delay_ms": 800}, max_attempts=1).id
    first, second = wait_until(
        lambda: len(_events(ledger, task_id)) >= 2 and _events(ledger, task_id), 10, what="the second run"
    )
    wait_until(lambda: _row(task_id).status == "succeeded", 5, what="success")
    row = _row(task_id)
    assert (row.attempt, row.result) == (1, {"attempt": 1, "runs": 2})
    assert (first["attempt"], second["attempt"]) == (1, 1)
    # The claim does not touch run_at_ms: it is still the time the snooze set.
    (snoozed_end,) = [e for e in _events(ledger, task_id, "end") if e.get("snoozed")]
    assert 800 - 5 <= row.run_at_ms - snoozed_end["wall"] * 1000 < 800 + 500
    late_ms = second["wall"] * 1000 - row.run_at_ms
    assert -5 <= late_ms < 1000, late_ms  # a poll-bound worker would be up to 5 s late
    assert "task snoozed: task=" + task_id in worker.output()


@pytest.mark.parametrize("name", ["demo.snooze", "demo.async_snooze"])
def test_snoozes_do_not_use_up_max_attempts(cairnq_db: Any, start_worker: Any, name: str) -> None:
    ids = [cq.submit(name, {"times": 5, "delay_ms": 0}, max_attempts=1).id for _ in range(3)]
    worker = start_worker("--burst", "--concurrency", "2")
    assert worker.wait() == 0, worker.output()[-3000:]
    for task_id in ids:
        row = _row(task_id)
        assert (row.status, row.attempt, row.result) == ("succeeded", 1, {"attempt": 1, "runs": 6})


def test_one_batch_item_snoozes_alone(cairnq_db: Any, start_worker: Any) -> None:
    snoozed = cq.submit("demo.snooze_batch", {"snooze_ms": 0}, max_attempts=1).id
    plain = [cq.submit("demo.snooze_batch", {}, max_attempts=1).id for _ in range(3)]
    worker = start_worker("--burst")
    assert worker.wait() == 0, worker.output()[-3000:]
    assert (_row(snoozed).status, _row(snoozed).result) == ("succeeded", {"attempt": 1, "runs": 2})
    for task_id in plain:
        assert (_row(task_id).status, _row(task_id).result) == ("succeeded", {"attempt": 1, "runs": 1})


def test_a_raised_snooze_snoozes_the_whole_batch(cairnq_db: Any, start_worker: Any, ledger: Any) -> None:
    ids = [cq.submit("demo.snooze_batch", {"raise_ms": 300}, max_attempts=1).id for _ in range(4)]
    worker = start_worker("--task", "demo.snooze_batch")
    wait_until(lambda: all(_row(task_id).status == "succeeded" for task_id in ids), 15, what="every item")
    for task_id in ids:
        assert (_row(task_id).attempt, _row(task_id).result) == (1, {"attempt": 1, "runs": 2})
    batches = [e for e in ledger() if e["event"] == "batch"]
    assert sorted(task_id for e in batches for task_id in e["ids"]) == sorted(ids * 2)
    gap = batches[-1]["wall"] - batches[0]["wall"]
    assert gap >= 0.3 - 0.005, gap
    assert worker.alive()


def test_a_cancel_requested_while_the_handler_runs_wins(
    cairnq_db: Any, start_worker: Any, ledger: Any, ledger_dir: Any
) -> None:
    task_id = cq.submit("demo.snooze", {"times": 1, "delay_ms": 0, "gate": True}).id
    worker = start_worker("--task", "demo.snooze")
    wait_until(lambda: _events(ledger, task_id), 20, what="start")
    assert cq.cancel(task_id).cancel_requested_at_ms is not None
    (ledger_dir / f"go-{task_id}").write_text("go")
    wait_until(lambda: _row(task_id).status == "canceled", 10, what="canceled")
    row = _row(task_id)
    assert (row.attempt, row.lease_until_ms, row.result) == (1, None, None)
    assert row.completed_at_ms is not None and row.worker_id.startswith("worker_")
    time.sleep(0.3)
    assert len(_events(ledger, task_id)) == 1  # never run again
    assert worker.alive()


def test_a_snooze_after_the_lease_was_lost_writes_nothing(
    cairnq_db: Any, start_worker: Any, ledger: Any, ledger_dir: Any
) -> None:
    task_id = cq.submit("demo.snooze", {"times": 1, "delay_ms": 0, "gate": True}).id
    worker = start_worker("--task", "demo.snooze")
    wait_until(lambda: _events(ledger, task_id), 20, what="start")
    # Another owner takes the task while the handler waits at its gate.
    assert Task.objects.filter(id=task_id, status="running").update(worker_id="worker_thief") == 1
    (ledger_dir / f"go-{task_id}").write_text("go")
    wait_until(lambda: _events(ledger, task_id, "end"), 10, what="the snooze")
    wait_until(lambda: "lease lost: task=" + task_id in worker.output(), 10, what="lease-lost log line")
    row = _row(task_id)
    assert (row.status, row.worker_id, row.attempt) == ("running", "worker_thief", 1)
    assert row.lease_until_ms is not None
    assert worker.alive()
