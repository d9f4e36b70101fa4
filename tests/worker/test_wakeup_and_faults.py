"""Pin prompt pickup without polling (PostgreSQL LISTEN, SQLite file watch),
the worker's connection names on PostgreSQL, and survival of killed database
connections: ``pg_terminate_backend`` of every worker connection mid-run is
logged and retried, the worker stays up and the queue is finished."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest
from django.db import connection

from cairnq_django import api
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
        task_id = api.submit("demo.noop", {"result": i}).id
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
    ids = [api.submit("demo.sleep", {"ms": 60}).id for _ in range(60)]
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
    # Logged as a database error and retried, not a crash.
    out = worker.output()
    assert "claim failed" in out and "retrying" in out


def test_sqlite_idle_wait_sees_every_commit_of_another_connection(cairnq_db: Any, dialect: str) -> None:
    # Commits in pairs a fraction of a millisecond apart, the WAL restarted
    # by a checkpoint before each pair (so its size stays put), the wait
    # armed between them: it must end on the second one every time. And the
    # loop's own connection's writes (its claims) must not end it.
    if dialect != "sqlite":
        pytest.skip("the commit counter is SQLite's; PostgreSQL wakes by LISTEN")
    from cairnq_django.worker.wakeup import CommitWaker

    other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    other.execute("CREATE TABLE IF NOT EXISTS waker_probe (x INTEGER)")
    for i in range(50):  # a WAL longer than one pair of commits
        other.execute("INSERT INTO waker_probe VALUES (?)", (i,))
    waker = CommitWaker(lambda: False, "default")
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
        other.execute("DROP TABLE waker_probe")
        other.close()
    assert slow == []
