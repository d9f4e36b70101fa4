"""Pin what a worker does when its database cannot serve it.

A SQLite file deleted, or replaced by another file renamed over its path,
under a running worker: the worker would go on with the old, nameless file
and never see new tasks; it exits 3 with a message naming the file instead.
These run a worker on a SQLite file of their own, whichever dialect the
session uses. A ``--burst`` worker on a database it cannot open exits 1 at
once, naming the database (the session's dialect: a directory or a non-
database file for SQLite, a missing database or a closed port for
PostgreSQL); without ``--burst`` the worker keeps waiting for it, as for an
outage.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_sqlite(subprocess_env: dict[str, str], tmp_path: Path) -> Path:
    """A migrated SQLite file of this test's own (the session's database stays untouched)."""
    path = tmp_path / "own.sqlite3"
    env = {**subprocess_env, "DATABASE_URL": f"sqlite:///{path}"}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=REPO, env=env, check=True, timeout=120
    )
    return path


def _on(path: Path) -> dict[str, str]:
    return {"DATABASE_URL": f"sqlite:///{path}"}


def test_deleted_database_file_stops_the_worker(cairnq_db: Any, start_worker: Any, own_sqlite: Path) -> None:
    worker = start_worker(env=_on(own_sqlite))
    worker.wait_ready()
    time.sleep(0.3)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{own_sqlite}{suffix}").unlink(missing_ok=True)
    sent = time.monotonic()
    assert worker.wait(10) == 3, worker.output()[-2000:]
    assert time.monotonic() - sent < 5
    assert f"SQLite database file {own_sqlite} was deleted" in worker.output()


def test_replaced_database_file_stops_the_worker(
    cairnq_db: Any, start_worker: Any, own_sqlite: Path, tmp_path: Path
) -> None:
    # A migrated copy made before the worker opens the file, renamed over it later.
    replacement = tmp_path / "replacement.sqlite3"
    shutil.copyfile(own_sqlite, replacement)
    worker = start_worker("--concurrency", "2", env=_on(own_sqlite))
    worker.wait_ready()
    time.sleep(0.3)
    os.replace(replacement, own_sqlite)
    assert worker.wait(10) == 3, worker.output()[-2000:]
    assert f"SQLite database file {own_sqlite} was replaced by another file" in worker.output()


def test_database_file_left_in_place_keeps_the_worker(cairnq_db: Any, start_worker: Any, own_sqlite: Path) -> None:
    # The check must not fire on a file that merely grew, checkpointed or got a new -wal.
    worker = start_worker(env=_on(own_sqlite))
    worker.wait_ready()
    Path(f"{own_sqlite}-shm").touch()
    time.sleep(1.5)
    assert worker.alive(), worker.output()[-2000:]


def _unopenable(dialect: str, tmp_path: Path) -> list[tuple[str, str]]:
    """(DATABASE_URL, what the message must say) per way of being unopenable."""
    if dialect == "sqlite":
        directory = tmp_path / "a_directory.sqlite3"
        directory.mkdir()
        garbage = tmp_path / "not_a_database.sqlite3"
        garbage.write_bytes(b"this is not a database file\n" * 200)
        return [
            (f"sqlite:///{directory}", "unable to open database file"),
            (f"sqlite:///{garbage}", "file is not a database"),
        ]
    return [
        ("postgres://root@127.0.0.1:5432/cairnq_no_such_database", 'database "cairnq_no_such_database" does not exist'),
        # A port nothing listens on: bound, never listened on, held while the worker runs.
        ("postgres://root@127.0.0.1:{port}/cairnq", "Connection refused"),
    ]


@pytest.fixture
def closed_port() -> Any:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


def test_burst_worker_on_an_unopenable_database_exits_non_zero(
    dialect: str, start_worker: Any, tmp_path: Path, closed_port: int
) -> None:
    for url, reason in _unopenable(dialect, tmp_path):
        url = url.format(port=closed_port)
        worker = start_worker("--burst", env={"DATABASE_URL": url})
        code = worker.wait(20)
        out = worker.output()
        assert code == 1, out[-2000:]
        assert "cannot open database 'default'" in out and reason in out, out[-2000:]
        assert "Traceback" not in out, out[-2000:]


def test_worker_without_burst_waits_for_an_unopenable_database(
    dialect: str, start_worker: Any, tmp_path: Path, closed_port: int
) -> None:
    url, _reason = _unopenable(dialect, tmp_path)[0]
    worker = start_worker(env={"DATABASE_URL": url.format(port=closed_port)})
    wait_until(lambda: "database unavailable" in worker.output() or not worker.alive(), 30, what="a retry")
    time.sleep(2.0)
    assert worker.alive(), worker.output()[-2000:]
    assert worker.output().count("database unavailable") >= 2, worker.output()[-2000:]
