"""Claiming ahead (``--claim-ahead`` / ``CAIRNQ["CLAIM_AHEAD"]``), with real worker processes.

A worker claiming ahead leases more calls than it has slots, in one claim,
and runs them as slots free: never more handlers at once than its
concurrency, each call's clock (``max_run_ms``) started by its handler, the
calls still waiting handed back at once when it stops, and no claiming ahead
for a handler with a limit of its own.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import intervals, max_overlap, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def starts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in events if event["event"] == "start"]


def running(ids: list[str]) -> int:
    return Task.objects.filter(id__in=ids, status="running").count()


def most_held(groups: list[list[str]], ledger: Any, timeout: float = 30) -> list[int]:
    """Sample until every task of ``groups`` succeeded; return the most held at once in each group.

    Held: leased (``running``) and its handler not yet ended. A task whose
    handler ended stays ``running`` until its settlement is written, while the
    slot it freed may already hold the next. The ledger is read after the
    rows, so a sample never counts an ended handler as held.
    """
    every = list({task_id for group in groups for task_id in group})
    most = [0] * len(groups)
    deadline = time.monotonic() + timeout
    while Task.objects.filter(id__in=every, status="succeeded").count() < len(every):
        leased = set(Task.objects.filter(id__in=every, status="running").values_list("id", flat=True))
        ended = {event["task_id"] for event in ledger() if event["event"] == "end"}
        held = leased - ended
        most = [max(seen, len(held.intersection(group))) for seen, group in zip(most, groups)]
        assert time.monotonic() < deadline, "the tasks did not finish"
        time.sleep(0.02)
    return most


def test_one_claim_leases_the_calls_ahead_and_they_run_one_slot_at_a_time(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    ids = [cq.submit("demo.sleep", {"ms": 250}).id for _ in range(6)]
    worker = start_worker("--concurrency", "1", "--claim-ahead", "3", "--task", "demo.sleep")
    worker.wait_ready()
    wait_until(lambda: starts(ledger()), 20, what="the first start")
    # One slot, three ahead: four leased to this worker while one handler runs.
    leased = Task.objects.filter(id__in=ids, status="running")
    assert leased.count() == 4
    assert len({(task.worker_id, task.attempt) for task in leased}) == 1
    assert all(task.lease_until_ms for task in leased)
    wait_until(lambda: Task.objects.filter(id__in=ids, status="succeeded").count() == 6, 30, what="all six")
    events = ledger()
    (spans,) = intervals(events).values()
    assert len(spans) == 6
    assert max_overlap(spans) == 1
    assert set(Task.objects.filter(id__in=ids).values_list("attempt", flat=True)) == {1}
    assert "concurrency: 1 (+3 claimed ahead)" in worker.output()


def test_async_handlers_claimed_ahead_wait_for_a_place_under_the_concurrency(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    ids = [cq.submit("demo.async_sleep", {"ms": 150}).id for _ in range(8)]
    worker = start_worker("--burst", "--concurrency", "2", "--claim-ahead", "4", "--task", "demo.async_sleep")
    assert worker.wait(60) == 0, worker.output()[-3000:]
    assert Task.objects.filter(id__in=ids, status="succeeded").count() == 8
    (spans,) = intervals(ledger()).values()
    assert len(spans) == 8
    assert max_overlap(spans) == 2


def test_max_run_counts_from_the_handler_start_not_from_the_claim(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    # Each call takes 400 ms of a 700 ms ceiling; the last waits about 800 ms
    # for its slot, so a clock started at the claim would time it out.
    ids = [cq.submit("demo.sleep", {"ms": 400}).id for _ in range(3)]
    worker = start_worker(
        "--burst", "--concurrency", "1", "--claim-ahead", "2", "--max-run-ms", "700", "--task", "demo.sleep"
    )
    assert worker.wait(60) == 0, worker.output()[-3000:]
    tasks = Task.objects.filter(id__in=ids)
    assert [task.status for task in tasks] == ["succeeded"] * 3
    assert {task.attempt for task in tasks} == {1}
    assert "handler timed out" not in worker.output()


def test_a_stop_hands_the_waiting_calls_back_at_once_without_counting_an_attempt(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    ids = [cq.submit("demo.sleep", {"ms": 1500}).id for _ in range(4)]
    worker = start_worker(
        "--concurrency", "1", "--claim-ahead", "3", "--drain-timeout", "10", "--task", "demo.sleep"
    )
    wait_until(lambda: starts(ledger()), 20, what="the first start")
    assert running(ids) == 4
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    # The three waiting calls are back in the queue while the first still runs.
    wait_until(lambda: running(ids) == 1, 5, what="the waiting calls handed back")
    assert time.monotonic() - signalled < 1.5
    (started,) = {event["task_id"] for event in starts(ledger())}
    for task in Task.objects.filter(id__in=ids).exclude(id=started):
        assert (task.status, task.worker_id, task.attempt, task.lease_until_ms) == ("queued", None, 0, None)
    # Another worker runs them at once, without waiting out a lease, while
    # the first still drains its one call.
    rescuer = start_worker("--burst", "--concurrency", "3", "--task", "demo.sleep")
    assert worker.wait(10) == 0, worker.output()[-3000:]
    assert Task.objects.get(id=started).status == "succeeded"
    # The stopped worker started nothing more.
    assert {event["task_id"] for event in starts(ledger()) if event["pid"] == worker.pid} == {started}
    assert "handed back 3 of 3 claimed-ahead task(s)" in worker.output()
    assert rescuer.wait(30) == 0
    assert Task.objects.filter(id__in=ids, status="succeeded").count() == 4
    assert {event["task_id"] for event in starts(ledger()) if event["pid"] == rescuer.pid} == set(ids) - {started}


def test_a_handler_with_a_limit_of_its_own_never_claims_ahead(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    # demo.limited allows two at once in a process: claiming ahead would lease
    # all six in the first claim and hold four of them while they wait.
    ids = [cq.submit("demo.limited", {"ms": 500}).id for _ in range(6)]
    worker = start_worker("--concurrency", "4", "--claim-ahead", "8", "--task", "demo.limited")
    worker.wait_ready()
    # The samples catch more than two held unfinished; the ledger shows two did run at once.
    (most,) = most_held([ids], ledger)
    assert most <= 2
    (spans,) = intervals(ledger()).values()
    assert max_overlap(spans) == 2
    # Its every source is limited, so the worker reports no claiming ahead.
    assert "claimed ahead" not in worker.output()


def test_a_call_canceled_while_it_waits_ends_canceled_without_running(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    first = cq.submit("demo.sleep", {"ms": 1500}, priority=5).id
    waiting = [cq.submit("demo.sleep", {"ms": 100}).id for _ in range(2)]
    # A 900 ms lease: a heartbeat every 300 ms brings the cancel requests in.
    worker = start_worker(
        "--concurrency", "1", "--claim-ahead", "2", "--task", "demo.sleep", overrides={"LEASE_MS": 900}
    )
    wait_until(lambda: starts(ledger()), 20, what="the first start")
    assert running([first, *waiting]) == 3
    for task_id in waiting:
        cq.cancel(task_id)
    wait_until(
        lambda: Task.objects.filter(id__in=[first, *waiting], status__in=["succeeded", "canceled"]).count() == 3,
        20,
        what="all three ended",
    )
    assert Task.objects.get(id=first).status == "succeeded"
    assert [Task.objects.get(id=task_id).status for task_id in waiting] == ["canceled", "canceled"]
    assert [event["task_id"] for event in starts(ledger())] == [first]
    assert worker.output().count("canceled before its handler started") == 2


def test_beside_handlers_that_claim_ahead_a_limited_one_takes_only_free_slots(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    # One slot and three ahead. demo.limited (its own concurrency 2) is drawn
    # first in each poll; claimed ahead, its second task would hold a limited
    # place while it waited behind the other.
    limited = [cq.submit("demo.limited", {"ms": 300}).id for _ in range(2)]
    plain = [cq.submit("demo.sleep", {"ms": 300}).id for _ in range(4)]
    worker = start_worker(
        "--concurrency", "1", "--claim-ahead", "3", "--task", "demo.limited", "--task", "demo.sleep"
    )
    worker.wait_ready()
    most_limited, most = most_held([limited, limited + plain], ledger)
    assert most_limited <= 1
    # The plain handler did claim ahead (one slot, yet more than one leased),
    # never beyond the slot and its three.
    assert 2 <= most <= 4
    (spans,) = intervals(ledger()).values()
    assert max_overlap(spans) == 1


def test_a_call_whose_lease_is_lost_while_it_waits_never_runs(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    first = cq.submit("demo.sleep", {"ms": 1500}, priority=5).id
    waiting = cq.submit("demo.sleep", {"ms": 100}).id
    worker = start_worker(
        "--concurrency", "1", "--claim-ahead", "1", "--task", "demo.sleep", overrides={"LEASE_MS": 900}
    )
    wait_until(lambda: starts(ledger()), 20, what="the first start")
    assert running([first, waiting]) == 2
    # Another owner now (as after a lease that expired and was taken over):
    # the next heartbeat finds the lease gone.
    Task.objects.filter(id=waiting).update(worker_id="worker_someone_else")
    wait_until(lambda: Task.objects.get(id=first).status == "succeeded", 20, what="the first task")
    wait_until(lambda: "lease lost before its handler started" in worker.output(), 5, what="the skip")
    # The first attempt never ran. (Once the other owner's lease expires,
    # recovery queues the task again and it runs as attempt 2.)
    assert (waiting, 1) not in {(event["task_id"], event["attempt"]) for event in starts(ledger())}
