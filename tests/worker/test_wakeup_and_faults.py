"""Pin prompt pickup without polling (PostgreSQL LISTEN, SQLite WAL watch),
the worker's connection names on PostgreSQL, and survival of killed database
connections: ``pg_terminate_backend`` of every worker connection mid-run is
logged and retried, the worker stays up and the queue is finished."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_pickup_is_prompt_with_a_long_poll_interval(
    cairnq_db: Any, start_worker: Any
) -> None:
    worker = start_worker(overrides={"POLL_INTERVAL_MS": 10_000})
    worker.wait_ready()
    time.sleep(0.5)  # idle: its first empty poll is behind it
    latencies = []
    for i in range(5):
        sent = time.monotonic()
        task_id = cq.submit("demo.noop", {"result": i}).id
        wait_until(
            lambda t=task_id: Task.objects.get(id=t).status == "succeeded",
            5,
            interval=0.005,
            what="pickup",
        )
        latencies.append(time.monotonic() - sent)
        time.sleep(0.2)
    latencies.sort()
    # Far below the 10 s poll interval: woken by NOTIFY / the WAL file changing.
    assert latencies[2] < 0.5, latencies


def _terminate_worker_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name LIKE %s AND pid <> pg_backend_pid()",
            ["cairnq_worker:%"],
        )
        return cursor.fetchone()[0]


def test_pg_terminate_backend_mid_run(
    cairnq_db: Any, dialect: str, start_worker: Any, ledger: Any
) -> None:
    if dialect != "postgres":
        pytest.skip("pg_terminate_backend is PostgreSQL only")
    ids = [cq.submit("demo.sleep", {"ms": 60}).id for _ in range(60)]
    worker = start_worker("--concurrency", "2", overrides={"LEASE_MS": 3000})
    worker_id = worker.wait_ready()
    wait_until(
        lambda: len([e for e in ledger() if e["event"] == "start"]) >= 4,
        20,
        what="first starts",
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE %s",
            [f"cairnq_worker:{worker_id}%"],
        )
        names = {row[0] for row in cursor.fetchall()}
    assert f"cairnq_worker:{worker_id}" in names
    killed = 0
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        killed += _terminate_worker_backends()
        time.sleep(0.3)
    assert killed > 0
    wait_until(
        lambda: Task.objects.filter(id__in=ids, status="succeeded").count() == len(ids),
        60,
        what="queue finished after the connection kills",
    )
    assert worker.alive()
    assert Task.objects.filter(id__in=ids, status="running").count() == 0
    # Logged as a database error and retried, not a crash. Behind a
    # transaction pooler a backend killed while idle in the pool is replaced
    # unseen, so only the direct LISTEN connection is sure to report it.
    out = worker.output()
    if settings.CAIRNQ.get("TRANSACTION_POOLING"):
        assert "LISTEN connection failed" in out and "retrying" in out
    else:
        assert "claim failed" in out and "retrying" in out


@pytest.mark.parametrize("mode", ["watched", "polled"])
def test_sqlite_idle_wait_sees_every_commit_of_another_connection(
    cairnq_db: Any, dialect: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Commits in pairs a fraction of a millisecond apart, the WAL restarted
    # by a checkpoint before each pair (so its size stays put), the wait
    # armed between them: it must end on the second one every time. And the
    # loop's own connection's writes (its claims) must not end it. "watched"
    # sleeps on the WAL file (Linux inotify); "polled" reads the counter on
    # a timer, as where the watch cannot be had.
    if dialect != "sqlite":
        pytest.skip("the commit counter is SQLite's; PostgreSQL wakes by LISTEN")
    from cairnq_django.worker.wakeups import CommitWaker

    other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    other.execute("CREATE TABLE IF NOT EXISTS waker_probe (x INTEGER)")
    for i in range(50):  # a WAL longer than one pair of commits
        other.execute("INSERT INTO waker_probe VALUES (?)", (i,))
    waker = CommitWaker(lambda: False, "default")
    if mode == "watched":
        # Slices longer than the wait: only the watch can end it in time.
        monkeypatch.setattr("cairnq_django.worker.wakeups._SLICE", 5.0)
        waker.start()
        if waker.watch is None:
            other.execute("DROP TABLE waker_probe")
            other.close()
            pytest.skip("no inotify here: the wait polls")
    slow = []
    try:
        for i in range(100):
            other.execute("PRAGMA wal_checkpoint(PASSIVE)")
            other.execute("INSERT INTO waker_probe VALUES (?)", (i,))
            waker.arm()
            other.execute("INSERT INTO waker_probe VALUES (?)", (i,))
            started = time.monotonic()
            waker.wait(2.0)
            if time.monotonic() - started > 0.5:
                slow.append(i)
        # Its own connection's writes do not wake it (the claim loop's claims).
        waker.arm()
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO waker_probe VALUES (0)")
        started = time.monotonic()
        waker.wait(0.3)
        assert time.monotonic() - started >= 0.29
    finally:
        waker.stop()
        other.execute("DROP TABLE waker_probe")
        other.close()
    assert slow == []


def _watched_waker(dialect: str) -> Any:
    if dialect != "sqlite":
        pytest.skip("the WAL watch is SQLite's; PostgreSQL wakes by LISTEN")
    from cairnq_django.worker.wakeups import CommitWaker

    waker = CommitWaker(lambda: False, "default")
    waker.start()
    if waker.watch is None:
        pytest.skip("no inotify here: the wait polls")
    return waker


def test_sqlite_watched_idle_wait_does_not_poll_the_counter(
    cairnq_db: Any, dialect: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # An idle wait on the WAL watch reads the commit counter once a slice
    # (0.1 s, the stop-request check), not every 20 ms: over a quiet second
    # about ten reads where polling makes about fifty.
    #
    # The watch is on the database's directory, and the kernel reports a
    # write to any file in it. A neighbour's database in the same directory
    # (another test run's in var/) used to cost a read for each of its
    # writes: hundreds a second, which made this test flaky. A writer
    # committing next to the database throughout pins that they cost none.
    import os
    import threading

    from cairnq_django.worker import wakeups

    waker = _watched_waker(dialect)
    neighbour_path = os.path.join(os.path.dirname(connection.settings_dict["NAME"]), f"neighbour-{os.getpid()}.sqlite3")
    stop = threading.Event()
    commits = 0

    def neighbour() -> None:
        nonlocal commits
        other = sqlite3.connect(neighbour_path, isolation_level=None)
        try:
            other.execute("PRAGMA journal_mode=WAL")
            other.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
            while not stop.is_set():
                other.execute("INSERT INTO t VALUES (1)")
                commits += 1
                time.sleep(0.002)
        finally:
            other.close()

    reads = 0
    wal_reports = 0
    version = waker._version
    drain = waker.watch.drain

    def counted() -> Any:
        nonlocal reads
        reads += 1
        return version()

    def counted_drain() -> bool:
        nonlocal wal_reports
        touched = drain()
        wal_reports += touched
        return touched

    monkeypatch.setattr(waker, "_version", counted)
    monkeypatch.setattr(waker.watch, "drain", counted_drain)
    writer = threading.Thread(target=neighbour)
    writer.start()
    try:
        time.sleep(0.1)  # the neighbour is writing
        waker.arm()
        reads = wal_reports = 0
        waker.wait(1.0)
        watched = reads
    finally:
        stop.set()
        writer.join()
        waker.stop()
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(neighbour_path + suffix):
                os.remove(neighbour_path + suffix)
    reads = 0
    waker.arm()  # stopped: the same waker polls now
    reads = 0
    waker.wait(1.0)
    polled = reads
    assert commits > 50, commits  # the neighbour did write throughout
    # One read a slice of the second and one for the deadline's part-slice,
    # plus a recheck series for a write to the database's own WAL (nothing
    # commits to it here, but another run could).
    slices = round(1.0 / wakeups._SLICE)
    allowed = slices + 1 + wal_reports * (1 + len(wakeups._PUBLISH_RECHECKS))
    assert watched <= allowed, (watched, allowed, wal_reports, commits)
    assert polled > 2 * (slices + 1), (polled, watched)


def test_sqlite_watched_wait_sees_a_commit_made_while_it_sleeps(
    cairnq_db: Any, dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another thread commits while the wait is asleep on the watch. The
    # kernel reports the WAL write before the commit is published (after
    # the writer's flush), so the wait must look again rather than sleep
    # through it: with slices longer than the wait, a missed publication
    # shows as a wait that runs to its timeout.
    import threading

    monkeypatch.setattr("cairnq_django.worker.wakeups._SLICE", 5.0)
    waker = _watched_waker(dialect)
    other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, check_same_thread=False)
    other.execute("PRAGMA synchronous=FULL")  # a flush between the write and the publication
    other.execute("CREATE TABLE IF NOT EXISTS waker_probe (x INTEGER)")
    slow = []
    try:
        for i in range(30):
            waker.arm()
            writer = threading.Timer(0.02, other.execute, ("INSERT INTO waker_probe VALUES (?)", (i,)))
            writer.start()
            started = time.monotonic()
            waker.wait(3.0)
            if time.monotonic() - started > 1.5:
                slow.append(i)
            writer.join()
    finally:
        waker.stop()
        other.execute("DROP TABLE waker_probe")
        other.close()
    assert slow == []


def test_sqlite_wal_watch_reports_writes_to_the_wal_only(cairnq_db: Any, dialect: str, tmp_path: Any) -> None:
    if dialect != "sqlite":
        pytest.skip("the WAL watch is SQLite's")
    from cairnq_django.worker.wal_watch import WalWatch

    database = tmp_path / "watched.sqlite3"
    writer = sqlite3.connect(database, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE t (x INTEGER)")
    watch = WalWatch.open(str(database))
    if watch is None:
        writer.close()
        pytest.skip("no inotify here")
    try:
        watch.drain()
        (tmp_path / "neighbour.txt").write_text("not the WAL")
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # writes the database file, empties the WAL
        watch.drain()
        (tmp_path / "neighbour.txt").write_text("still not the WAL")
        assert watch.drain() is False
        writer.execute("INSERT INTO t VALUES (1)")
        assert watch.drain() is True
        assert watch.drain() is False  # read once
    finally:
        watch.close()
        writer.close()


def test_sqlite_watched_wait_ends_on_wake_from_another_thread(cairnq_db: Any, dialect: str) -> None:
    import threading

    waker = _watched_waker(dialect)
    try:
        waker.arm()
        timer = threading.Timer(0.05, waker.wake)
        timer.start()
        started = time.monotonic()
        waker.wait(10.0)
        # Far below the 10 s timeout (and below a slice): the pipe ended the select.
        assert time.monotonic() - started < 2.0
        timer.join()
        # A wake-up before the wait (a slot freed during the claim) ends it at once.
        waker.arm()
        waker.wake()
        started = time.monotonic()
        waker.wait(10.0)
        assert time.monotonic() - started < 2.0
    finally:
        waker.stop()
    waker.wake()  # after stop: the pipe is gone, and waking is still harmless


def test_sqlite_watched_wait_returns_on_stop_request(cairnq_db: Any, dialect: str) -> None:
    if dialect != "sqlite":
        pytest.skip("the WAL watch is SQLite's")
    from cairnq_django.worker.wakeups import CommitWaker

    stop = False
    waker = CommitWaker(lambda: stop, "default")
    waker.start()
    try:
        waker.arm()
        import threading

        def request() -> None:
            nonlocal stop
            stop = True

        timer = threading.Timer(0.05, request)
        timer.start()
        started = time.monotonic()
        waker.wait(10.0)
        assert time.monotonic() - started < 2.0  # noticed within a slice, not at the timeout
        timer.join()
    finally:
        waker.stop()


def test_sqlite_wait_polls_where_the_wal_cannot_be_watched(
    cairnq_db: Any, dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No inotify (another platform, or the kernel refused): start() keeps
    # the polling wait, which still ends on another connection's commit.
    if dialect != "sqlite":
        pytest.skip("the WAL watch is SQLite's")
    from cairnq_django.worker import wal_watch
    from cairnq_django.worker.wakeups import CommitWaker

    monkeypatch.setattr(wal_watch, "_libc", lambda: None)
    waker = CommitWaker(lambda: False, "default")
    waker.start()
    other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    try:
        assert waker.watch is None
        other.execute("CREATE TABLE IF NOT EXISTS waker_probe (x INTEGER)")
        waker.arm()
        other.execute("INSERT INTO waker_probe VALUES (1)")
        started = time.monotonic()
        waker.wait(10.0)
        assert time.monotonic() - started < 5.0
    finally:
        waker.stop()
        other.execute("DROP TABLE IF EXISTS waker_probe")
        other.close()
