"""Pin that an idle worker wakes when a delayed task or a retry backoff is due,
not when its poll interval next ends: with a 5 s poll, a task delayed 300 ms
and a retry backed off ~300 ms both start within a second of being due (and
never before)."""

from __future__ import annotations

import time
from typing import Any

import pytest

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

LONG_POLL = {"POLL_INTERVAL_MS": 5000}


def _starts(ledger: Any, task_id: str) -> list[dict[str, Any]]:
    return [e for e in ledger() if e["event"] == "start" and e["task_id"] == task_id]


def _idle_worker(start_worker: Any, **overrides: Any) -> Any:
    worker = start_worker("--task", "demo.sleep", "--task", "demo.flaky", overrides={**LONG_POLL, **overrides})
    worker.wait_ready()
    time.sleep(0.5)  # past its first empty claim, into the long idle wait
    return worker


def test_delayed_task_starts_when_due_not_at_the_next_poll(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    _idle_worker(start_worker)
    for delay_ms in (300, 800):
        task_id = cq.submit("demo.sleep", {"ms": 0}, delay_ms=delay_ms).id
        run_at_ms = Task.objects.get(id=task_id).run_at_ms
        start = wait_until(lambda: _starts(ledger, task_id), 4, what="the delayed start")[0]
        late_ms = start["wall"] * 1000 - run_at_ms
        # A poll-bound worker would start it up to 5 s late.
        assert -5 <= late_ms < 1000, late_ms
        wait_until(lambda: Task.objects.get(id=task_id).status == "succeeded", 5)


def test_retry_backoff_starts_when_due_not_at_the_next_poll(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    # Attempt 1 fails; its retry is backed off 150-300 ms by the worker itself.
    _idle_worker(start_worker, RETRY_BACKOFF_MS=300)
    task_id = cq.submit("demo.flaky", {"fail_times": 1}).id
    starts = wait_until(lambda: len(_starts(ledger, task_id)) >= 2 and _starts(ledger, task_id), 4, what="the retry")
    gap_ms = (starts[1]["wall"] - starts[0]["wall"]) * 1000
    assert 150 <= gap_ms < 1300, gap_ms
    wait_until(lambda: Task.objects.get(id=task_id).status == "succeeded", 5)
    assert Task.objects.get(id=task_id).attempt == 2
