"""Real ``cairnq_worker`` processes keep their registry row (``cairnq_django_worker``) true.

Pins: a worker that does not register at start-up, or registers the wrong
host, pid, queues, names, capacities or version; a row that goes stale while
the worker is idle (the beat used to skip idle turns) or busy; more than one
write of the row per heartbeat interval; a clean stop left unmarked; a
killed worker still listed as live after three intervals, or listed as lost
before that; and rows of long-gone workers that are never pruned.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

import cairnq_django as cairnq
from cairnq_django.models import Task, Worker
from cairnq_django.worker.presence import RATE_WINDOW_S, Presence, package_version

from .conftest import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BEAT_MS = 250
FAST = {"HEARTBEAT_INTERVAL_MS": BEAT_MS}


def registered(worker: WorkerProcess) -> Worker:
    worker_id = worker.wait_ready()
    return wait_until(lambda: Worker.objects.filter(pk=worker_id).first(), 10, what="registry row")


def seen_at(worker_id: str) -> int:
    return Worker.objects.values_list("last_seen_at_ms", flat=True).get(pk=worker_id)


def test_registers_at_start_up_with_what_it_serves(cairnq_db: Any, start_worker: Any) -> None:
    worker = start_worker(
        "--queue", "default", "--queue", "mail", "--concurrency", "3",
        "--task", "demo.noop", "--task", "demo.hang", overrides=FAST,
    )
    row = registered(worker)
    assert row.host == socket.gethostname() and row.pid == worker.pid
    assert row.queues == ["default", "mail"] and row.names == ["demo.noop", "demo.hang"]
    assert row.concurrency == 3 and row.heartbeat_interval_ms == BEAT_MS
    assert row.resources == {"gpu": 1} and row.global_resources == {"openai": 2}
    assert row.version == package_version() != ""
    assert row.stopped_at_ms is None and row.started_at_ms <= row.last_seen_at_ms
    (listed,) = cairnq.workers()
    assert listed.id == row.id and listed.state == "live"


def test_refreshes_while_idle_and_while_busy(cairnq_db: Any, start_worker: Any) -> None:
    row = registered(start_worker(overrides=FAST))
    # Idle: nothing in flight, and the row still moves every beat.
    first = row.last_seen_at_ms
    wait_until(lambda: seen_at(row.id) >= first + 2 * BEAT_MS, 10, what="idle refreshes")
    task = cairnq.submit("demo.hang", {"seconds": 30})
    wait_until(lambda: Task.objects.get(pk=task.id).status == "running", 10, what="running")
    wait_until(lambda: Worker.objects.get(pk=row.id).in_flight == 1, 10, what="in flight reported")
    lease = Task.objects.get(pk=task.id).lease_until_ms
    busy = seen_at(row.id)
    wait_until(lambda: seen_at(row.id) >= busy + 2 * BEAT_MS, 10, what="busy refreshes")
    # The same beats renewed the task's lease.
    assert Task.objects.get(pk=task.id).lease_until_ms > lease
    assert Task.objects.get(pk=task.id).worker_id == row.id


@pytest.fixture
def row_writes(cairnq_db: Any) -> Iterator[Callable[[], int]]:
    """Count inserts and updates of registry rows, by any process, from now on."""
    if connection.vendor == "postgresql":

        def stat() -> int:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables WHERE relname = 'cairnq_django_worker'"
                )
                return int(cursor.fetchone()[0])

        base = stat()
        yield lambda: stat() - base
        return
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE test_worker_writes (n INTEGER)")
        for event in ("INSERT", "UPDATE"):
            cursor.execute(
                f"CREATE TRIGGER test_worker_{event.lower()} AFTER {event} ON cairnq_django_worker "
                "BEGIN INSERT INTO test_worker_writes VALUES (1); END"
            )

    def count() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM test_worker_writes")
            return int(cursor.fetchone()[0])

    try:
        yield count
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER test_worker_insert")
            cursor.execute("DROP TRIGGER test_worker_update")
            cursor.execute("DROP TABLE test_worker_writes")


def test_at_most_one_row_write_per_beat(cairnq_db: Any, start_worker: Any, row_writes: Callable[[], int]) -> None:
    worker = start_worker(overrides=FAST)
    row = registered(worker)
    # Part of the time busy, part idle: the count must not depend on it.
    task = cairnq.submit("demo.sleep", {"ms": 1000})
    wait_until(lambda: Task.objects.get(pk=task.id).status == "succeeded", 15, what="task done")
    wait_until(lambda: Worker.objects.get(pk=row.id).succeeded == 1, 10, what="the success counted")
    assert Worker.objects.get(pk=row.id).per_minute > 0
    time.sleep(1.0)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    # From the registration to the stop, by the row's own (database) clock.
    final = Worker.objects.get(pk=row.id)
    assert final.stopped_at_ms is not None
    elapsed_ms = final.stopped_at_ms - final.started_at_ms
    # The registration, one write per beat at most, the stop; and at least
    # one beat in every two intervals (a loaded machine may delay some).
    most = 1 + elapsed_ms // BEAT_MS + 1
    least = elapsed_ms // (2 * BEAT_MS)

    # PostgreSQL reports another backend's counts when it flushes them (at
    # its exit at the latest): read until two readings a second apart agree.
    def settled() -> int | None:
        first = row_writes()
        time.sleep(1.0)
        return first if first == row_writes() and first >= least else None

    writes = wait_until(settled, 15, interval=0, what="write counts")
    assert least <= writes <= most, (writes, elapsed_ms)


def test_clean_stop_marks_the_row_stopped(cairnq_db: Any, start_worker: Any) -> None:
    worker = start_worker(overrides=FAST)
    row = registered(worker)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    stopped = Worker.objects.get(pk=row.id)
    assert stopped.stopped_at_ms is not None and stopped.in_flight == 0
    assert cairnq.workers() == [] and cairnq.workers(include_lost=True) == []
    assert [w.state for w in cairnq.workers(include_stopped=True)] == ["stopped"]


def test_a_killed_worker_is_lost_after_three_beats(cairnq_db: Any, start_worker: Any) -> None:
    worker = start_worker(overrides=FAST)
    row = registered(worker)
    wait_until(lambda: seen_at(row.id) > row.last_seen_at_ms, 10, what="a beat")
    worker.kill_group()
    killed = time.monotonic()
    last = seen_at(row.id)
    # Still live right after: two beats may be missed, as a lease allows.
    assert [w.id for w in cairnq.workers()] == [row.id]
    wait_until(lambda: cairnq.workers() == [], 10, what="lost")
    # Lost no sooner than three beats after its last refresh (which was at most a beat before the kill).
    assert time.monotonic() - killed >= (3 * BEAT_MS - BEAT_MS) / 1000 - 0.05
    assert [(w.id, w.state) for w in cairnq.workers(include_lost=True)] == [(row.id, "lost")]
    assert Worker.objects.get(pk=row.id).last_seen_at_ms == last


def test_rows_of_long_gone_workers_are_pruned(cairnq_db: Any, start_worker: Any) -> None:
    gone = start_worker(overrides=FAST)
    gone_row = registered(gone)
    gone.kill_group()
    stopped = start_worker(overrides=FAST)
    stopped_row = registered(stopped)
    stopped.signal(signal.SIGTERM)
    assert stopped.wait(30) == 0
    keeper = start_worker(overrides={**FAST, "WORKER_KEEP_MS": 1_000})
    keeper_row = registered(keeper)
    wait_until(
        lambda: not Worker.objects.filter(pk__in=[gone_row.id, stopped_row.id]).exists(), 15, what="pruned rows"
    )
    # The pruning worker's own row is fresh, so it stays.
    assert list(Worker.objects.values_list("id", flat=True)) == [keeper_row.id]
    # The line is logged after the delete commits, so it can trail the rows going.
    wait_until(lambda: "pruned" in keeper.output() and "worker registry row" in keeper.output(), 10, what="the prune logged")


def test_the_rate_covers_about_the_last_minute() -> None:
    ended = [0]
    presence = Presence(
        "w", queues=["q"], names=[], concurrency=1, resources={}, global_resources={},
        heartbeat_interval_ms=1_000, counters=lambda: (0, ended[0], 0),
    )
    assert presence._rate(0.0, 0) == 0.0  # the registration: nothing measured yet
    assert presence._rate(30.0, 30) == 60.0  # 30 in half a minute
    assert presence._rate(60.0, 60) == 60.0
    # The window moves: what ended before its start no longer counts.
    assert presence._rate(90.0, 60) == 30.0  # since 30.0: 30 in a minute
    assert presence._rate(90.0 + RATE_WINDOW_S, 60) == 0.0
    ended[0] = 65
    assert presence.record().succeeded == 65
