"""Issue 21's bound: one worker process holds at most 2 connections of its own plus 1 listening, whatever ``--concurrency``.

A real ``cairnq_worker --concurrency 16`` drains no-op and short-sleep tasks
(handlers that touch no database, so every connection counted is the
worker's) while the test samples what it holds:

* PostgreSQL, direct: the backends named ``cairnq_worker:<id>`` in
  ``pg_stat_activity`` (claim, shared, LISTEN), at most 3;
* through PgBouncer (the pgbouncer leg of scripts/test): the pooler's
  clients of that name (``SHOW CLIENTS``, read-only) at most 2, and the
  direct LISTEN backend at most 1;
* SQLite: the process's open descriptors of the database file, one per
  connection, at most 2.

Each case also checks it saw the connections it bounds, so the count cannot
pass by reading nothing.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import WorkerProcess

pytestmark = pytest.mark.django_db(transaction=True)

CONCURRENCY = 16
POOLED_RUN = bool(settings.CAIRNQ.get("TRANSACTION_POOLING"))


def _backends(application_name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            [application_name],
        )
        return int(cursor.fetchone()[0])


def _listeners(application_name: str) -> int:
    # The listener's last statement stays its LISTEN while it waits; a pooler's
    # server connections lent to the worker carry its name too, never that query.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s AND query = 'LISTEN cairnq_queued'",
            [application_name],
        )
        return int(cursor.fetchone()[0])


def _pooler_clients(application_name: str) -> int:
    import psycopg

    port = int(connection.settings_dict["PORT"])
    with psycopg.connect(
        host="127.0.0.1", port=port, user=connection.settings_dict.get("USER") or "root",
        dbname="pgbouncer", autocommit=True, prepare_threshold=None,
    ) as admin:
        cursor = admin.execute("SHOW CLIENTS")
        columns = [column.name for column in cursor.description or ()]
        clients = [dict(zip(columns, row)) for row in cursor.fetchall()]
    return sum(
        1
        for client in clients
        if client["database"] == connection.settings_dict["NAME"] and client["application_name"] == application_name
    )


def _sqlite_handles(pid: int) -> int:
    """Open descriptors of the database file in process ``pid``: one per SQLite connection."""
    path = os.path.realpath(connection.settings_dict["NAME"])
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) == path:
                count += 1
        except OSError:
            continue  # closed meanwhile
    return count


def _drain_sampling(worker: WorkerProcess, sample: Callable[[], dict[str, int]]) -> dict[str, int]:
    """Sample while the worker idles a moment and then drains; return the most seen of each count."""
    most: dict[str, int] = {}

    def take() -> None:
        for key, value in sample().items():
            most[key] = max(most.get(key, 0), value)

    idle_until = time.monotonic() + 1.0
    while time.monotonic() < idle_until:
        take()
        time.sleep(0.02)
    ids = [t.id for t in cq.submit_many([("demo.noop", {"n": i}) for i in range(800)] + [("demo.sleep", {"ms": 20})] * 160)]
    deadline = time.monotonic() + 120
    while Task.objects.filter(id__in=ids, status="succeeded").count() < len(ids):
        assert worker.alive(), worker.output()[-3000:]
        assert time.monotonic() < deadline, "the drain did not finish"
        take()
        time.sleep(0.02)
    take()
    return most


def test_worker_holds_at_most_two_connections_plus_one_listening(
    cairnq_db: Any, dialect: str, start_worker: Any
) -> None:
    worker = start_worker("--concurrency", str(CONCURRENCY))
    worker_id = worker.wait_ready()
    name = f"cairnq_worker:{worker_id}"
    banner = worker.output()
    if dialect == "sqlite":
        assert "connections: 2 (claim; settle + heartbeat + housekeeping)" in banner, banner
        # /proc shows what the process has open; SQLite has no server to ask.
        if not Path(f"/proc/{worker.pid}/fd").is_dir():
            pytest.skip("counting a process's open files needs Linux's /proc")
        most = _drain_sampling(worker, lambda: {"files": _sqlite_handles(worker.pid)})
        assert 1 <= most["files"] <= 2, most
    elif POOLED_RUN:
        assert "connections: 2 pooled (claim; settle + heartbeat + housekeeping) + 1 listen" in banner, banner
        most = _drain_sampling(worker, lambda: {"clients": _pooler_clients(name), "listen": _listeners(name)})
        assert 1 <= most["clients"] <= 2, most
        assert most["listen"] == 1, most
    else:
        assert "connections: 2 pooled (claim; settle + heartbeat + housekeeping) + 1 listen" in banner, banner
        most = _drain_sampling(
            worker, lambda: {"own": _backends(name), "listen": _listeners(name), "handlers": _backends(f"{name}:h")}
        )
        assert 2 <= most["own"] <= 3, most
        assert most["listen"] == 1, most
        # These handlers touch no database, so handler threads opened none.
        assert most["handlers"] == 0, most
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()[-3000:]
