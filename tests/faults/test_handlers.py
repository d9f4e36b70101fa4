"""Hung, leaking and paused handlers cannot corrupt a row: a handler that never
returns (F20), a leaked context writing after its handler returned (F21), a
zombie worker SIGSTOPped past its lease then resumed (F22), and a killed
worker replaced at once (F23). Every late write is fenced: it changes zero
rows (I4) and the worker stays up (I5)."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import starts, verify, wait_terminal, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

FAST = {"LEASE_MS": 2000, "HEARTBEAT_INTERVAL_MS": 500, "POLL_INTERVAL_MS": 50}


@pytest.mark.parametrize("cpu", [False, True], ids=["sleeping", "cpu-bound"])
def test_f20a_handler_that_never_returns_hits_max_run(
    cairnq_db: Any, start_worker: Any, ledger: Any, cpu: bool, figures: dict[str, Any]
) -> None:
    stuck = cq.submit("faults.spin", {"cpu": cpu}, max_attempts=1).id
    after = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 5})] * 3)]
    worker = start_worker("--max-run-ms", "2000", "--concurrency", "1", overrides=FAST)
    wait_until(lambda: [e for e in starts(ledger()) if e["task_id"] == stuck], 20, what="spin start")
    began = time.monotonic()
    wait_terminal([stuck, *after], 30)
    row = Task.objects.get(id=stuck)
    assert (row.status, row.error["code"], row.error["retryable"]) == ("failed", "handler_timeout", True)
    # The slot was freed: the next tasks ran although the handler never returned.
    assert Task.objects.filter(id__in=after, status="succeeded").count() == 3
    assert time.monotonic() - began < 15
    assert worker.alive()
    assert "abandoned" in worker.output()
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    figures.update(tasks=4, faults=f"{'CPU' if cpu else 'sleep'} loop, --max-run-ms 2000")


def test_f20b_no_ceiling_then_admin_cancel(
    cairnq_db: Any, start_worker: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    task_id = cq.submit("faults.cancelable", {"seconds": 60}).id
    worker = start_worker(overrides=FAST)
    wait_until(lambda: starts(ledger()), 20, what="start")
    time.sleep(3 * FAST["LEASE_MS"] / 1000)  # the heartbeat holds the lease meanwhile
    row = Task.objects.get(id=task_id)
    assert (row.status, row.attempt) == ("running", 1)
    cq.cancel(task_id)
    wait_terminal([task_id], 10)
    assert Task.objects.get(id=task_id).status == "canceled"
    assert next(e for e in ledger() if e["event"] == "end")["cancel_seen"] is True
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    figures.update(tasks=1, faults="endless handler + cancel")


@pytest.mark.smoke
def test_f21_leaked_context_is_fenced(
    cairnq_db: Any, start_worker: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    # Attempt 1 leaks its context and fails; the same worker (same worker_id)
    # claims attempt 2 at once, and the leaked thread writes during it.
    task_id = cq.submit("faults.leak_then_fail", {"after": 1.0, "second_ms": 2000}).id
    worker = start_worker("--retry-backoff-ms", "0", overrides=FAST)
    worker_id = worker.wait_ready()
    wait_until(lambda: len([e for e in ledger() if e["event"] == "late_write"]) >= 2, 20,
               what="late writes of attempt 1")
    during = Task.objects.get(id=task_id)
    assert (during.status, during.attempt, during.worker_id) == ("running", 2, worker_id)
    assert (during.progress, during.message) == (0.5, "attempt 2")
    late = [e for e in ledger() if e["event"] == "late_write"]
    assert all(e["refused"] and e["error"] == "LostLease" and e["attempt"] == 1 for e in late), late
    wait_terminal([task_id], 20)
    final = Task.objects.get(id=task_id)
    assert (final.status, final.attempt, final.result) == ("succeeded", 2, "second")
    assert final.message != "leaked" and final.lease_until_ms is None
    # demo.leaker: a leaked context of a finished task cannot renew its lease.
    done = cq.submit("demo.leaker", {"after": 0.3}).id
    wait_until(lambda: len([e for e in ledger() if e["event"] == "late_write"]) >= 4, 20,
               what="late writes after return")
    assert all(e["refused"] for e in ledger() if e["event"] == "late_write")
    assert Task.objects.get(id=done).lease_until_ms is None
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    figures.update(tasks=2, faults="4 late writes from leaked contexts", why="attempt 2 is a retry, not a duplicate")


@pytest.mark.smoke
def test_f22_zombie_worker_sigstop_past_its_lease(
    cairnq_db: Any, start_worker: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    task_id = cq.submit("demo.sleep", {"ms": 1500}).id
    # One slot: the zombie claims its next task only once the paused handler returned.
    zombie = start_worker("--concurrency", "1", overrides=FAST)
    zombie_id = zombie.wait_ready()
    wait_until(lambda: starts(ledger()), 20, what="zombie start")
    zombie.proc.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        rescuer = start_worker(overrides=FAST)
        rescuer_id = rescuer.wait_ready()
        wait_terminal([task_id], 20)
        row = Task.objects.get(id=task_id)
        assert (row.status, row.attempt, row.worker_id) == ("succeeded", 2, rescuer_id)
        finished = (row.updated_at_ms, row.completed_at_ms, row.result, row.progress)
        # Stopped 3 x lease in all: the rescuer's start-up, the lease running
        # out and its attempt took most of it already.
        time.sleep(max(0.0, stopped + 3 * FAST["LEASE_MS"] / 1000 - time.monotonic()))
    finally:
        zombie.proc.send_signal(signal.SIGCONT)
    # The zombie wakes and finishes its handler; its completion must match 0 rows.
    wait_until(lambda: len([e for e in ledger() if e["event"] == "end"]) >= 2, 20, what="zombie end")
    wait_until(lambda: "lease lost" in zombie.output() or "lost its lease" in zombie.output(), 20,
               what="the zombie's lease loss logged")
    # The zombie goes back to claiming normally.
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait(10) == 0
    again = cq.submit("demo.sleep", {"ms": 1}).id
    wait_terminal([again], 20)
    assert Task.objects.get(id=again).worker_id == zombie_id
    # It claimed that task after the paused handler returned, and its
    # settlements go out in order: a late write of the paused attempt would
    # have landed before this one.
    row = Task.objects.get(id=task_id)
    assert (row.updated_at_ms, row.completed_at_ms, row.result, row.progress) == finished
    assert row.worker_id == rescuer_id and row.attempt == 2
    verify(ledger(), [task_id, again], figures, lost_pids={zombie.pid})
    zombie.signal(signal.SIGTERM)
    assert zombie.wait(10) == 0
    figures.update(faults="SIGSTOP 3 x lease, then SIGCONT", why="the paused attempt overlapped the rescuer's (lease lost)")


def test_f23_restart_right_after_kill(
    cairnq_db: Any, start_worker: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    ids = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 3000})] * 4)]
    old = start_worker("--concurrency", "4", overrides=FAST)
    old_id = old.wait_ready()
    wait_until(lambda: len(starts(ledger())) == 4, 20, what="four starts")
    old.kill_group()
    new = start_worker("--concurrency", "4", overrides=FAST)
    new_id = new.wait_ready()
    # Worker ids are per process: the new one never owns the old leases.
    assert new_id != old_id
    assert set(Task.objects.filter(id__in=ids).values_list("worker_id", flat=True)) == {old_id}
    wait_terminal(ids, 30)
    for row in Task.objects.filter(id__in=ids):
        assert (row.status, row.attempt, row.worker_id) == ("succeeded", 2, new_id)
    verify(ledger(), ids, figures, lost_pids={old.pid})
    new.signal(signal.SIGTERM)
    assert new.wait(10) == 0
    figures.update(faults="kill -9 + immediate restart", why="the 4 in-flight tasks re-ran after lease expiry")
