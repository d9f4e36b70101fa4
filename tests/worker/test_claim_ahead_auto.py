"""The automatic claim-ahead (``CLAIM_AHEAD = "auto"``, the default), with real worker processes.

A worker learns how long each name's calls run. It claims ahead only tasks
of names seen to run short, only while every call in flight is of a short
name, and hands back what still waits as soon as a call runs long, so no
task waits behind a long one while another worker could run it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import cairnq_django as cq
from cairnq_django.models import Task
from cairnq_django.worker.run_times import AHEAD_WORK_MS, BATCH_AHEAD, SAMPLES, SHORT_MS, RunTimes

from .conftest import intervals, max_overlap, wait_until
from .test_claim_ahead import most_held

pytestmark = pytest.mark.django_db(transaction=True)

SHORT = {"ms": 5}
LONG_MS = 8000


def succeeded(ids: list[str]) -> bool:
    return Task.objects.filter(id__in=ids, status="succeeded").count() == len(ids)


def test_run_times_call_a_name_short_only_once_seen_quick_enough() -> None:
    times = RunTimes()
    for _ in range(SAMPLES - 1):
        times.record("quick", 1.0)
    assert not times.short("quick")  # not seen often enough yet
    times.record("quick", 1.0)
    assert times.short("quick")
    for _ in range(SAMPLES):
        times.record("slow", SHORT_MS * 10)
    assert not times.short("slow") and not times.short("never-seen")
    assert times.short_names(("quick", "slow", "never-seen")) == ("quick",)
    # A batch call counts whole: 100 tasks of 2 ms make a long call, and a
    # quick batch call is claimed ahead by calls, not by its tasks.
    for _ in range(SAMPLES):
        times.record("batch", SHORT_MS * 10)
    assert not times.short("batch")
    for _ in range(SAMPLES):
        times.record("quick-batch", 1.0, batch=True)
    assert times.ahead(("quick-batch",), 1) == BATCH_AHEAD
    assert times.ahead(("quick-batch",), 4) == 4 * BATCH_AHEAD
    # About AHEAD_WORK_MS of estimated work per slot, within the ceiling.
    assert times.ahead(("quick",), 1) == int(AHEAD_WORK_MS / 1.0)
    assert times.ahead(("quick",), 8) == 63
    assert times.ahead((), 1) == int(AHEAD_WORK_MS / SHORT_MS)


@pytest.mark.parametrize(
    "only",
    [
        pytest.param(["--task", "demo.sleep"], id="its-own-draw"),
        # Drawn with every other plain handler, most never seen: the short
        # name is drawn again on its own for the calls ahead.
        pytest.param([], id="drawn-with-unknown-names"),
    ],
)
def test_short_tasks_are_claimed_ahead_by_default(
    cairnq_db: Any, start_worker: Any, ledger: Any, only: list[str]
) -> None:
    ids = [task.id for task in cq.submit_many([("demo.sleep", SHORT) for _ in range(300)])]
    worker = start_worker("--concurrency", "1", *only)
    worker.wait_ready()
    (most,) = most_held([ids], ledger)
    # More leased than the one slot at some moment, never more than one running.
    assert most > 1
    (spans,) = intervals(ledger()).values()
    assert len(spans) == 300 and max_overlap(spans) == 1
    assert "claims ahead tasks seen to run short" in worker.output()


def test_tasks_of_a_long_name_are_never_claimed_ahead(cairnq_db: Any, start_worker: Any, ledger: Any) -> None:
    ids = [task.id for task in cq.submit_many([("demo.sleep", {"ms": 150}) for _ in range(8)])]
    worker = start_worker("--concurrency", "1", "--task", "demo.sleep")
    worker.wait_ready()
    (most,) = most_held([ids], ledger)
    assert most == 1


def test_a_call_running_long_hands_the_waiting_calls_to_another_worker(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    first = start_worker("--concurrency", "1", "--task", "demo.sleep")
    first.wait_ready()
    learn = [task.id for task in cq.submit_many([("demo.sleep", SHORT) for _ in range(30)])]
    wait_until(lambda: succeeded(learn), 30, what="the first worker learned the name is short")
    # The same name, once long: the first claim after it leases it with short ones ahead.
    (long,) = cq.submit_many([("demo.sleep", {"ms": LONG_MS})])
    shorts = [task.id for task in cq.submit_many([("demo.sleep", SHORT) for _ in range(8)])]
    wait_until(
        lambda: any(e["event"] == "start" and e["task_id"] == long.id for e in ledger()), 20, what="the long call"
    )
    second = start_worker("--concurrency", "1", "--task", "demo.sleep")
    wait_until(lambda: succeeded(shorts), 30, what="the short tasks")
    events = ledger()
    long_start = next(e["wall"] for e in events if e["event"] == "start" and e["task_id"] == long.id)
    short_ends = [e["wall"] for e in events if e["event"] == "end" and e["task_id"] in shorts]
    assert len(short_ends) == len(shorts)
    # None of them waited out the long call: the second worker ran what the
    # first gave back (its start-up takes a few seconds on a loaded machine),
    # 2 s or more before the long call's end (its start + LONG_MS at the
    # soonest), which the test need not wait for.
    assert max(short_ends) < long_start + LONG_MS / 1000 - 2.0
    assert not [e for e in events if e["event"] == "end" and e["task_id"] == long.id]
    assert "handed back" in first.output()
    assert set(Task.objects.filter(id__in=shorts).values_list("attempt", flat=True)) == {1}
    assert second.output()


def test_a_fixed_claim_ahead_still_works_and_zero_turns_it_off(cairnq_db: Any, start_worker: Any, ledger: Any) -> None:
    ids = [task.id for task in cq.submit_many([("demo.sleep", SHORT) for _ in range(200)])]
    worker = start_worker("--concurrency", "1", "--claim-ahead", "0", "--task", "demo.sleep")
    worker.wait_ready()
    (most,) = most_held([ids], ledger)
    assert most == 1
    assert "claims ahead" not in worker.output()


def test_claim_ahead_takes_auto_or_a_number(cairnq_db: Any, start_worker: Any) -> None:
    bad = start_worker("--claim-ahead", "sometimes")
    assert bad.wait(timeout=30) != 0
    assert '"auto"' in bad.output()


def test_a_batch_handler_is_claimed_at_most_two_calls_ahead(cairnq_db: Any, start_worker: Any) -> None:
    # A batch call already shares one claim among its tasks; two calls ahead
    # overlap the next claim with the call running, and more only added leases
    # (63 ahead drained a sixth slower than none). Quick calls of 8 would be
    # claimed ahead by the dozen on the estimate alone.
    ids = [task.id for task in cq.submit_many([("demo.batch", {"n": i}) for i in range(800)])]
    worker = start_worker("--concurrency", "1", "--task", "demo.batch")
    worker.wait_ready()
    most = 0
    deadline = time.monotonic() + 60
    while not succeeded(ids):
        assert time.monotonic() < deadline, "the batch tasks did not finish"
        most = max(most, Task.objects.filter(id__in=ids, status="running").count())
        time.sleep(0.005)
    # One call of 8 in its slot, two claimed ahead, the settler's write in
    # progress and up to two claims' worth of ended calls waiting behind it
    # (loop._settlement_behind). Uncapped, the calls held 480 at once.
    assert 0 < most <= 10 * 8, most
    assert "claims ahead tasks seen to run short" in worker.output()
