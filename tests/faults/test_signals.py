"""Graceful shutdown under signals loses nothing: SIGTERM of an idle and of a
busy worker (drain, then hand back), a double SIGINT (immediate exit, lease
recovery), a storm of SIGTERMs against a restarting worker (F07, F08), and a
worker embedded in a non-main thread leaving the host's handlers alone (F09)."""

from __future__ import annotations

import random
import signal
import threading
import time
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, connections

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import FULL, starts, verify, wait_terminal, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

FAST = {"LEASE_MS": 2000, "HEARTBEAT_INTERVAL_MS": 500, "POLL_INTERVAL_MS": 50}


@pytest.mark.smoke
def test_f07a_sigterm_idle_worker(cairnq_db: Any, start_worker: Any, figures: dict[str, Any]) -> None:
    worker = start_worker(overrides={**FAST, "POLL_INTERVAL_MS": 500})
    worker.wait_ready()
    time.sleep(0.3)
    sent = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(5) == 0
    assert time.monotonic() - sent < 0.5 + 1.0
    figures.update(faults="SIGTERM (idle)")


@pytest.mark.smoke
def test_f07b_sigterm_drains_then_hands_back(
    cairnq_db: Any, start_worker: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    drain = 3
    short = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 1000})] * 4, priority=5)]
    long = [t.id for t in cq.submit_many([("demo.hang", {"seconds": 30})] * 4, priority=5)]
    later = cq.submit("demo.sleep", {"ms": 10}).id
    worker = start_worker("--concurrency", "8", "--drain-timeout", str(drain), overrides=FAST)
    worker_id = worker.wait_ready()
    wait_until(lambda: len(starts(ledger())) == 8, 20, what="eight starts")
    signalled = time.time()
    worker.signal(signal.SIGTERM)
    assert worker.wait(drain + 4) == 0, worker.output()[-2000:]
    assert time.time() - signalled < drain + 2
    # No claim after the signal.
    assert all(e["wall"] < signalled for e in starts(ledger()))
    assert Task.objects.filter(id__in=short, status="succeeded").count() == 4
    for row in Task.objects.filter(id__in=long):
        assert (row.status, row.worker_id, row.attempt, row.lease_until_ms) == ("queued", None, 0, None)
    assert not Task.objects.filter(status="running", worker_id=worker_id).exists()
    assert Task.objects.get(id=later).status == "queued"
    # Another worker completes the handed-back tasks without waiting for a lease.
    Task.objects.filter(id__in=long).update(payload={"seconds": 0.05})
    rescuer = start_worker("--burst", "--concurrency", "4", overrides=FAST)
    assert rescuer.wait(20) == 0
    ids = [*short, *long, later]
    verify(ledger(), ids, figures, lost_pids={worker.pid})
    figures.update(faults="SIGTERM with 8 in flight", why="4 handed-back tasks re-run (attempt not counted)")


@pytest.mark.smoke
def test_f07c_double_sigint_exits_at_once(
    cairnq_db: Any, start_worker: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    ids = [t.id for t in cq.submit_many([("demo.hang", {"seconds": 30})] * 2)]
    worker = start_worker("--concurrency", "2", "--drain-timeout", "30", overrides=FAST)
    wait_until(lambda: len(starts(ledger())) == 2, 20, what="two starts")
    worker.signal(signal.SIGINT)
    time.sleep(0.1)
    sent = time.monotonic()
    worker.signal(signal.SIGINT)
    assert worker.wait(5) != 0
    assert time.monotonic() - sent < 2
    Task.objects.filter(id__in=ids).update(payload={"seconds": 0.05})
    rescuer = start_worker("--concurrency", "2", overrides=FAST)
    wait_terminal(ids, 20)  # recovered by lease expiry
    verify(ledger(), ids, figures, lost_pids={worker.pid})
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait(10) == 0
    figures.update(faults="SIGINT x2", why="both in-flight tasks re-run after lease expiry")


def _idle_in_transaction() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%%'"
            " AND application_name LIKE %s AND datname = current_database()",
            ["cairnq_worker:%"],
        )
        return cursor.fetchone()[0]


def test_f08_signal_storm(
    cairnq_db: Any, dialect: str, supervisor: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    total = 2000 if FULL else 300
    # Many signals: a task may sit on several doubly-signalled workers.
    ids = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 20})] * total, max_attempts=20)]
    sup = supervisor(1, "--concurrency", "4", "--drain-timeout", "1", overrides=FAST)
    rng = random.Random(8)
    signals = doubles = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        worker = sup.workers[0]
        try:
            worker.wait_ready(30)  # each incarnation gets to work first
        except BaseException:  # noqa: BLE001, S112 - died before its banner: the supervisor restarts it
            continue
        time.sleep(rng.uniform(0.05, 0.2))
        try:
            worker.signal(signal.SIGTERM)
            signals += 1
            if rng.random() < 0.3:  # sometimes a second one: exit at once, lease recovery
                time.sleep(rng.uniform(0.05, 0.2))
                worker.signal(signal.SIGTERM)
                signals += 1
                doubles += 1
        except ProcessLookupError:
            pass
        wait_until(lambda w=worker: not w.alive(), 10, what="signalled worker exit")
    wait_terminal(ids, 120)
    events = ledger()
    codes = sup.stop()
    pids = {pid for pid, _ in sup.exits}
    verdict = verify(events, ids, figures, lost_pids=pids)
    assert verdict.duplicates <= signals
    assert codes == [0]
    if dialect == "postgres":
        assert _idle_in_transaction() == 0
    for pid, code in sup.exits:
        # 0 after a drain; 128 + SIGTERM after a second signal.
        assert code in (0, 128 + signal.SIGTERM, -signal.SIGTERM), (pid, code)
    outputs = "".join(w.output() for w in sup.workers)
    assert "Traceback" not in outputs
    figures.update(
        faults=f"{signals} x SIGTERM ({doubles} doubled), {len(sup.exits)} restarts",
        why="tasks in flight at a double signal re-ran after lease expiry; hand-backs re-ran"
        if verdict.duplicates else "",
    )


def test_f09_worker_in_a_non_main_thread(cairnq_db: Any, figures: dict[str, Any]) -> None:
    ids = [t.id for t in cq.submit_many([("demo.noop", {})] * 5)]

    def host_handler(signum: int, frame: Any) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, host_handler)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call_command("cairnq_worker", "--max-tasks", "5", "--task", "demo.noop", verbosity=0)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    try:
        thread = threading.Thread(target=run)
        thread.start()
        thread.join(30)
        assert not thread.is_alive()
        assert not errors, errors
        assert signal.getsignal(signal.SIGTERM) is host_handler
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert Task.objects.filter(id__in=ids, status="succeeded").count() == 5
    figures.update(tasks=5, faults="worker run from a thread")
