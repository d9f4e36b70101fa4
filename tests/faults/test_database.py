"""Database faults lose nothing and kill no worker: a PostgreSQL restart
mid-run, fast and immediate (F10), killed connections (F11), the server down
for longer than the lease (F12), a server that hangs -- a table lock held by
someone else, a stopped backend (F13) -- and SQLite contention between a web
process and two workers, the misconfigured-SQLite check, and a SQLite file
whose disk fills up (F14).

Restarts and stops use a private cluster (``private_cluster``), never the
shared server; F11 kills only backends of this test database."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

import cairnq_django as cq
from cairnq_django.models import Task

from ._invariants import check, rows_from
from .conftest import (
    FULL,
    REPO_ROOT,
    PrivateCluster,
    starts,
    submit_private,
    verify,
    wait_terminal,
    wait_until,
)

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

FAST = {"LEASE_MS": 2000, "HEARTBEAT_INTERVAL_MS": 500, "POLL_INTERVAL_MS": 50}


def _pg_only(dialect: str) -> None:
    if dialect != "postgres":
        pytest.skip("PostgreSQL fault (runs in the PostgreSQL half)")


def _private_workers(start_worker: Any, cluster: PrivateCluster, n: int, *args: str, **kw: Any) -> list[Any]:
    env = {"DATABASE_URL": cluster.url}
    return [start_worker(*args, env=env, overrides=kw.get("overrides", FAST)) for _ in range(n)]


def _wait_private(cluster: PrivateCluster, ids: list[str], timeout: float) -> None:
    def done() -> bool:
        try:
            rows = cluster.rows(ids)
        except Exception:  # noqa: BLE001 - the server may still be coming back
            return False
        return all(r.status in ("succeeded", "failed", "canceled") for r in rows)

    wait_until(done, timeout, interval=0.3, what=f"{len(ids)} private-cluster tasks terminal")


def _private_verdict(cluster: PrivateCluster, events: list[dict[str, Any]], ids: list[str],
                     figures: dict[str, Any], **kwargs: Any) -> Any:
    rows = cluster.rows(ids)
    assert len(rows) == len(ids)
    verdict = check(events, rows, **kwargs)
    figures.update(tasks=len(ids), lost=verdict.lost, duplicates=verdict.duplicates)
    verdict.assert_ok()
    return verdict


def _connection_rate_ok(cluster: PrivateCluster, worker_ids: list[str]) -> int:
    """Return the most connections one worker opened in any one second (server log)."""
    text = cluster.log.read_text(errors="replace")
    per_second: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        match = re.match(r"(\S+ \S+)\.\d+ .*connection authorized: .*application_name=cairnq_worker:(worker_\w+)", line)
        if match and match.group(2) in worker_ids:
            per_second[(match.group(2), match.group(1))] += 1
    return max(per_second.values(), default=0)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_f10_postgres_restart_mid_run(
    cairnq_db: Any, dialect: str, private_cluster: PrivateCluster, start_worker: Any,
    ledger: Any, mode: str, figures: dict[str, Any],
) -> None:
    _pg_only(dialect)
    cluster = private_cluster
    cluster._pg("psql", "-h", "127.0.0.1", "-p", str(cluster.url.split(":")[-1].split("/")[0]),
                "-U", "postgres", "-d", "cairnq_faults", "-c", "ALTER SYSTEM SET log_connections = on")
    cluster.ctl("reload")
    total = 1000 if FULL else 200
    ids = submit_private(cluster, "demo.sleep", [{"ms": 40}] * total)
    workers = _private_workers(start_worker, cluster, 4, "--concurrency", "4")
    worker_ids = [w.wait_ready() for w in workers]
    wait_until(lambda: sum(r.status == "succeeded" for r in cluster.rows(ids)) >= 0.3 * total,
               60, interval=0.1, what="30% progress")
    cluster.restart(mode)
    _wait_private(cluster, ids, 120)
    assert all(w.alive() for w in workers)  # I5: same pids
    verdict = _private_verdict(cluster, ledger(), ids, figures, lease_loss_ok=True)
    assert _connection_rate_ok(cluster, worker_ids) <= 5 * 6  # 6 threads/connections per worker
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(15) == 0
        # The outage is logged a bounded number of times, not once per retry.
        assert worker.output().count(" ERROR ") <= 12, worker.output()[-3000:]
    figures.update(faults=f"pg_ctl restart -m {mode}", why=(
        "attempts whose lease or settlement met the outage"
        + ("; claims undone by the crash (asynchronous claim commit) re-run" if mode == "immediate" else "")
    ) if verdict.duplicates else "")


def _terminate(worker_ids: list[str]) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND split_part(application_name, ':', 2) = ANY(%s)",
            [worker_ids],
        )
        return cursor.fetchone()[0]


@pytest.mark.smoke
def test_f11_pg_terminate_backend_storm(
    cairnq_db: Any, dialect: str, start_worker: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    _pg_only(dialect)
    total, seconds = (600, 20) if FULL else (150, 6)
    ids = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 60})] * total, max_attempts=20)]
    workers = [start_worker("--concurrency", "3", overrides=FAST) for _ in range(2)]
    worker_ids = [w.wait_ready() for w in workers]
    wait_until(lambda: len(starts(ledger())) >= 4, 20, what="first starts")
    killed = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        killed += _terminate(worker_ids)
        time.sleep(0.5)
    assert killed > 0
    wait_terminal(ids, 120)
    assert all(w.alive() for w in workers)
    verdict = verify(ledger(), ids, figures, lease_loss_ok=True)
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait(15) == 0
    figures.update(faults=f"{killed} backends terminated",
                   why="settlements lost with their connection past the lease" if verdict.duplicates else "")


def test_f12_database_down_longer_than_the_lease(
    cairnq_db: Any, dialect: str, private_cluster: PrivateCluster, start_worker: Any,
    ledger: Any, figures: dict[str, Any],
) -> None:
    _pg_only(dialect)
    cluster = private_cluster
    ids = submit_private(cluster, "demo.sleep", [{"ms": 1500}] * 8 + [{"ms": 30}] * 40)
    workers = _private_workers(start_worker, cluster, 2, "--concurrency", "4")
    for w in workers:
        w.wait_ready()
    wait_until(lambda: len(starts(ledger())) >= 8, 30, what="handlers running")
    cluster.stop("fast")
    time.sleep(3 * FAST["LEASE_MS"] / 1000)
    cluster.start()
    _wait_private(cluster, ids, 120)
    assert all(w.alive() for w in workers)  # I5
    verdict = _private_verdict(cluster, ledger(), ids, figures, lease_loss_ok=True)
    out = "".join(w.output() for w in workers)
    lost_logged = out.count("lost its lease") + out.count("lease lost") + out.count("LostLease")
    # Every re-run is explained by a lease lost during the outage, and logged.
    if verdict.duplicates:
        assert lost_logged >= 1, out[-3000:]
    # No hot loop: the outage produced a bounded number of log lines.
    assert len(out.splitlines()) < 2000
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait(15) == 0
    figures.update(faults=f"server stopped {3 * FAST['LEASE_MS'] // 1000} s (3 x lease)",
                   why="leases expired by the DB clock during the outage; late writes refused")


def test_f13b_table_lock_held_by_someone_else(
    cairnq_db: Any, dialect: str, private_cluster: PrivateCluster, start_worker: Any,
    ledger: Any, figures: dict[str, Any],
) -> None:
    _pg_only(dialect)
    cluster = private_cluster
    ids = submit_private(cluster, "demo.sleep", [{"ms": 50}] * 60)
    workers = _private_workers(start_worker, cluster, 2, "--concurrency", "2", "--drain-timeout", "3")
    for w in workers:
        w.wait_ready()
    wait_until(lambda: len(starts(ledger())) >= 4, 30, what="handlers running")
    holder = cluster.connect()
    holder.autocommit = False
    holder.execute("LOCK TABLE cairnq_tasks IN ACCESS EXCLUSIVE MODE")
    try:
        time.sleep(3)
        sent = time.monotonic()
        workers[0].signal(signal.SIGTERM)
        code = workers[0].wait(3 + 5)
        answered = time.monotonic() - sent
        time.sleep(2)
    finally:
        holder.rollback()
        holder.close()
    assert code == 0, workers[0].output()[-3000:]
    assert answered < 3 + 2
    assert workers[1].alive()
    _wait_private(cluster, ids, 60)
    verdict = _private_verdict(cluster, ledger(), ids, figures, lease_loss_ok=True, lost_pids={workers[0].pid})
    workers[1].signal(signal.SIGTERM)
    assert workers[1].wait(15) == 0
    figures.update(faults="ACCESS EXCLUSIVE lock held 5 s + SIGTERM during it",
                   why="leases that expired behind the lock" if verdict.duplicates else "")


def test_f13a_stopped_backend(
    cairnq_db: Any, dialect: str, private_cluster: PrivateCluster, start_worker: Any,
    ledger: Any, figures: dict[str, Any],
) -> None:
    _pg_only(dialect)
    cluster = private_cluster
    ids = submit_private(cluster, "demo.sleep", [{"ms": 50}] * 60)
    worker = _private_workers(start_worker, cluster, 1, "--concurrency", "2")[0]
    worker_id = worker.wait_ready()
    wait_until(lambda: len(starts(ledger())) >= 2, 30, what="handlers running")
    with cluster.connect() as conn:
        pids = [r[0] for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            [f"cairnq_worker:{worker_id}"]).fetchall()]
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(3 * FAST["LEASE_MS"] / 1000)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    _wait_private(cluster, ids, 60)
    assert worker.alive()
    verdict = _private_verdict(cluster, ledger(), ids, figures, lease_loss_ok=True)
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    figures.update(faults=f"SIGSTOP of the worker's main backend {3 * FAST['LEASE_MS'] // 1000} s",
                   why="leases that expired while the claim connection hung" if verdict.duplicates else "")


def test_f14a_sqlite_contention_web_process_and_two_workers(
    cairnq_db: Any, dialect: str, start_worker: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    if dialect != "sqlite":
        pytest.skip("SQLite contention case")
    from django.db import connections

    total = 3000 if FULL else 600
    workers = [start_worker("--concurrency", "4", overrides=FAST) for _ in range(2)]
    for w in workers:
        w.wait_ready()
    ids: list[str] = []
    errors: list[BaseException] = []

    def web() -> None:
        # The "web process": submits in small batches plus admin-like reads.
        try:
            for _ in range(total // 40):
                ids.extend(t.id for t in cq.submit_many([("demo.sleep", {"ms": 5})] * 20))
                cq.stats()
                list(Task.objects.order_by("-created_at_ms")[:100])
                Task.objects.filter(status="queued").count()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    reader_done = threading.Event()

    def long_reader() -> None:
        # A read transaction held open for a while (WAL cannot checkpoint past it).
        import sqlite3

        conn = sqlite3.connect(connection.settings_dict["NAME"])
        conn.execute("BEGIN")
        conn.execute("SELECT count(*) FROM cairnq_tasks").fetchone()
        reader_done.wait(8)
        conn.rollback()
        conn.close()

    reader = threading.Thread(target=long_reader)
    reader.start()
    producers = [threading.Thread(target=web) for _ in range(2)]
    for p in producers:
        p.start()
    for p in producers:
        p.join(180)
    reader_done.set()
    reader.join()
    assert not errors, errors  # no "database is locked" reached a producer
    assert len(ids) == total
    wait_terminal(ids, 180)
    verify(ledger(), ids, figures)
    assert all(w.alive() for w in workers)
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait(15) == 0
    # The WAL is checkpointed (truncated) once the reader let go.
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        busy, _, _ = cursor.fetchone()
    assert busy == 0
    assert os.path.getsize(connection.settings_dict["NAME"] + "-wal") == 0
    figures.update(faults="2 producers + admin reads + 8 s read txn vs 2 workers", why="")


def test_f14b_transaction_mode_unset_opens_immediate(dialect: str, figures: dict[str, Any]) -> None:
    if dialect != "sqlite":
        pytest.skip("SQLite configuration check")
    import warnings

    from django.conf import settings
    from django.test import override_settings

    from cairnq_django.checks import _check_database

    plain = {"ENGINE": "django.db.backends.sqlite3", "NAME": "/tmp/cairnq-faults-x.sqlite3"}
    deferred = {**plain, "OPTIONS": {"transaction_mode": "DEFERRED"}}
    databases = {"default": settings.DATABASES["default"], "lite": plain, "deferred": deferred}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # overriding DATABASES warns; only the check reads it
        with override_settings(DATABASES=databases):
            # Unset: the app opens IMMEDIATE itself (tests/test_first_run.py runs it).
            assert _check_database({"DATABASE": "lite"}) == []
            messages = _check_database({"DATABASE": "deferred"})
    found = [m for m in messages if m.id == "cairnq.W005"]
    assert found, messages
    assert not found[0].is_serious()
    assert '"IMMEDIATE"' in (found[0].hint or "")
    # tests/test_checks.py pins the lower-case and EXCLUSIVE variants of the same check.
    figures.update(faults="transaction_mode unset / DEFERRED")


# ---- F14c: the SQLite file's disk fills up -------------------------------------------


@pytest.fixture
def small_tmpfs(dialect: str) -> Iterator[Path]:
    """Mount a 2 MB tmpfs for one test and unmount it after; skip where mounting is not allowed."""
    if dialect != "sqlite":
        pytest.skip("SQLite full-disk case")
    root = Path(tempfile.mkdtemp(prefix="cairnq-f14c-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(root)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        root.rmdir()
        pytest.skip(f"cannot mount a 2 MB tmpfs (needs root): {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield root
    finally:
        # A worker killed at teardown may still hold a file open for a moment.
        if subprocess.run(["umount", str(root)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(root)], capture_output=True, check=False)
        root.rmdir()


def _fill(path: Path, leave: int = 0) -> None:
    """Grow ``path`` until its filesystem has at most ``leave`` bytes free (0: until ENOSPC)."""
    page = os.statvfs(path.parent).f_frsize
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            stats = os.statvfs(path.parent)
            if leave and stats.f_bavail * stats.f_frsize <= leave:
                return
            try:
                os.write(fd, b"\0" * page)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return
    finally:
        os.close(fd)


# Runs in a subprocess on the tmpfs database (a "web process"): submit through
# the public API until a submit fails, then try one batch on the full disk.
_SUBMIT_SCRIPT = """
import json, sys, django
django.setup()
import cairnq_django as cairnq
from django.db import OperationalError
from cairnq_django.exceptions import CairnQError

args = json.load(sys.stdin)
payload = {"ms": args["ms"], "pad": "x" * args["pad"]}
ids, errors = [], []

def describe(exc):
    return {"type": type(exc).__name__, "message": str(exc),
            "cairnq": isinstance(exc, CairnQError), "operational": isinstance(exc, OperationalError)}

for _ in range(args["most"]):
    try:
        ids.append(cairnq.submit("demo.sleep", payload).id)
    except Exception as exc:
        errors.append(describe(exc))
        break
if errors:
    try:
        cairnq.submit_many([("demo.sleep", payload)] * 3)
    except Exception as exc:
        errors.append(describe(exc))
print(json.dumps({"ids": ids, "errors": errors}))
"""


def _submit_lite(env: dict[str, str], most: int, pad: int, ms: int) -> dict[str, Any]:
    """Submit up to ``most`` tasks from a separate process; return its ids and errors."""
    result = subprocess.run(
        [sys.executable, "-c", _SUBMIT_SCRIPT],
        input=json.dumps({"most": most, "pad": pad, "ms": ms}),
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def test_f14c_sqlite_disk_full(
    cairnq_db: Any, dialect: str, small_tmpfs: Path, start_worker: Any, subprocess_env: dict[str, str],
    ledger: Any, figures: dict[str, Any],
) -> None:
    db = small_tmpfs / "queue.sqlite3"
    url = f"sqlite:///{db}"
    env = dict(subprocess_env, DATABASE_URL=url)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=REPO_ROOT, env=env,
                   check=True, capture_output=True, timeout=180)
    # Held open to the end, as a web process would: the database never loses
    # its last connection, so no close-time checkpoint frees space behind the test.
    holder = sqlite3.connect(db, timeout=30)
    try:
        worker = start_worker("--concurrency", "1", env={"DATABASE_URL": url},
                              overrides={"LEASE_MS": 10_000, "HEARTBEAT_INTERVAL_MS": 1000, "POLL_INTERVAL_MS": 50})
        worker.wait_ready()
        ballast = small_tmpfs / "ballast"
        _fill(ballast, leave=512 * 1024)
        # The queue itself fills the last 512 KB: 8 KB payloads, 400 ms handlers,
        # so most are still queued when the disk is full.
        filled = _submit_lite(env, most=500, pad=8000, ms=400)
        ids: list[str] = filled["ids"]
        single, batch = filled["errors"]
        assert ids, filled
        for error in (single, batch):
            assert error["type"] == "DatabaseFull" and error["cairnq"] and error["operational"], error
            assert str(db) in error["message"] and "full" in error["message"], error
        # Top off to the last byte so every write of the worker fails too.
        _fill(ballast)
        wait_until(lambda: "is full" in worker.output() or not worker.alive(), 20,
                   what="the worker to log the full disk")
        time.sleep(3)  # the worker keeps polling against the full disk
        assert worker.alive(), worker.output()[-3000:]
        waiting = holder.execute(
            "SELECT count(*) FROM cairnq_tasks WHERE status IN ('queued', 'running')").fetchone()[0]
        assert waiting > 0
        os.unlink(ballast)

        def all_terminal(task_ids: list[str]) -> bool:
            marks = ",".join("?" * len(task_ids))
            found = holder.execute(
                f"SELECT count(*) FROM cairnq_tasks WHERE id IN ({marks})"
                " AND status IN ('succeeded', 'failed', 'canceled')",
                task_ids).fetchone()[0]
            return bool(found == len(task_ids))

        wait_until(lambda: all_terminal(ids), 60, interval=0.25, what=f"{len(ids)} tasks after space was freed")
        more = _submit_lite(env, most=3, pad=10, ms=10)
        assert len(more["ids"]) == 3 and not more["errors"], more
        wait_until(lambda: all_terminal(more["ids"]), 30, interval=0.25, what="tasks submitted after the fill")
        assert worker.alive()
        out = worker.output()
        assert "database reachable again" in out, out[-3000:]
        # No hot loop: failed claims back off (0.25 s doubling to 5 s) even
        # though each refused write touches the WAL file the idle wait watches.
        assert out.count("claim failed again") < 30, out[-3000:]
        # Nothing half-written: the table holds exactly the submits that returned.
        everything = ids + more["ids"]
        rows = rows_from(
            dict(zip(("id", "status", "attempt", "worker_id", "lease_until_ms"), row))
            for row in holder.execute("SELECT id, status, attempt, worker_id, lease_until_ms FROM cairnq_tasks")
        )
        assert sorted(r.id for r in rows) == sorted(everything)
        verdict = check(ledger(), rows, lease_loss_ok=True)
        figures.update(tasks=len(rows), lost=verdict.lost, duplicates=verdict.duplicates)
        verdict.assert_ok()
        assert holder.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        worker.signal(signal.SIGTERM)
        assert worker.wait(15) == 0
    finally:
        holder.close()
    figures.update(
        faults=f"2 MB tmpfs filled by {len(ids)} x 8 KB tasks + ballast, {waiting} waiting; freed after 3 s",
        why="settlements that met the full disk past the lease" if verdict.duplicates else "",
    )
