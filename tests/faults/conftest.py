"""The reliability suite's harness: real worker processes, a supervisor that
restarts killed ones, the ledger, the invariant checker, a private PostgreSQL
cluster for the cases that restart or stop the server, and the figures table.

Every case carries ``@pytest.mark.fault``; the ``smoke`` subset runs in every
``pytest`` run, the rest only with ``CAIRNQ_FAULTS=full`` (``scripts/faults``
sets it). With ``CAIRNQ_FAULTS_REPORT=<file>`` each case appends one JSON line
of figures (case, dialect, tasks, faults, lost, duplicates, result).
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

# The worker-test harness (subprocess workers, ledger) is reused as is.
from worker.conftest import (  # noqa: F401 - fixtures re-exported for the fault cases
    WorkerProcess,
    ledger,
    ledger_dir,
    read_ledger,
    start_worker,
    wait_until,
)

from cairnq_django.models import Task

from ._invariants import Row, Verdict, check, rows_from

FULL = os.environ.get("CAIRNQ_FAULTS") == "full"
REPO_ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FULL:
        return
    skip = pytest.mark.skip(
        reason="non-smoke fault case: runs with CAIRNQ_FAULTS=full (scripts/faults)"
    )
    for item in items:
        if item.get_closest_marker("fault") and not item.get_closest_marker("smoke"):
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    figures = getattr(item, "fault_figures", None)
    target = os.environ.get("CAIRNQ_FAULTS_REPORT")
    if not target or figures is None or report.skipped:
        return
    if report.when == "call" or (report.when == "setup" and report.failed):
        line = dict(figures)
        line.setdefault("case", item.name)
        line["test"] = item.nodeid
        line["result"] = "pass" if report.passed else "FAIL"
        line["seconds"] = round(report.duration, 1)
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")


@pytest.fixture
def figures(request: pytest.FixtureRequest, dialect: str) -> dict[str, Any]:
    """The figures a case reports: fill ``tasks``, ``faults``, ``lost``, ``duplicates``, ``why``."""
    data: dict[str, Any] = {
        "dialect": dialect,
        "tasks": 0,
        "faults": "",
        "lost": 0,
        "duplicates": 0,
        "why": "",
    }
    request.node.fault_figures = data
    return data


def final_rows(ids: list[str]) -> list[Row]:
    """Read the final rows of ``ids`` (in chunks, to stay under SQLite's variable limit)."""
    out: list[Row] = []
    for i in range(0, len(ids), 5000):
        out.extend(
            rows_from(
                Task.objects.filter(id__in=ids[i : i + 5000]).values(
                    "id", "status", "attempt", "worker_id", "lease_until_ms"
                )
            )
        )
    return out


def verify(
    events: list[dict[str, Any]], ids: list[str], figures: dict[str, Any], **kwargs: Any
) -> Verdict:
    """Run the checker, copy its counts into the figures, and assert it found nothing."""
    rows = final_rows(ids)
    assert len(rows) == len(ids), f"{len(ids) - len(rows)} enqueued rows vanished"
    verdict = check(events, rows, **kwargs)
    figures.update(
        tasks=len(ids), lost=verdict.lost, duplicates=verdict.duplicates
    )
    verdict.assert_ok()
    integrity_ok()
    return verdict


def integrity_ok() -> None:
    """I7's storage half: SQLite ``PRAGMA integrity_check`` is ``ok`` (PG: no-op)."""
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA integrity_check")
        assert cursor.fetchone()[0] == "ok"


def terminal_count(ids: list[str]) -> int:
    return Task.objects.filter(
        id__in=ids, status__in=("succeeded", "failed", "canceled")
    ).count()


def wait_terminal(ids: list[str], timeout: float, what: str = "") -> None:
    """Wait until every id is terminal (I1's quiescence), polling the database."""
    def done() -> bool:
        total = 0
        for i in range(0, len(ids), 5000):
            total += terminal_count(ids[i : i + 5000])
        return total == len(ids)

    wait_until(done, timeout, interval=0.25, what=what or f"{len(ids)} tasks terminal")


def starts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "start"]


class Supervisor:
    """Keep ``size`` workers running: restart any that exits, remember every pid.

    ``kill_random`` SIGKILLs one worker's process group and returns its pid;
    the killed pids are what the checker accepts re-runs from (I2).
    """

    def __init__(self, start: Callable[[], WorkerProcess], size: int) -> None:
        self._start = start
        self.workers = [start() for _ in range(size)]
        self.exits: list[tuple[int, int]] = []  # (pid, exit code)
        self.killed: list[int] = []
        self.restarts = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            with self._lock:
                for i, worker in enumerate(self.workers):
                    code = worker.proc.poll()
                    if code is not None:
                        self.exits.append((worker.pid, code))
                        self.workers[i] = self._start()
                        self.restarts += 1

    def kill_random(self) -> int:
        with self._lock:
            worker = random.choice([w for w in self.workers if w.alive()])
            try:
                os.killpg(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.killed.append(worker.pid)
            return worker.pid

    def stop(self, timeout: float = 30.0) -> list[int]:
        """Stop restarting, SIGTERM every worker, wait; return their exit codes."""
        self._stop.set()
        self._thread.join(5)
        codes = []
        for worker in self.workers:
            if worker.alive():
                worker.signal(signal.SIGTERM)
        for worker in self.workers:
            codes.append(worker.wait(timeout))
        return codes


@pytest.fixture
def supervisor(start_worker: Callable[..., WorkerProcess]) -> Iterator[Callable[..., Supervisor]]:  # noqa: F811 - the fixture
    made: list[Supervisor] = []

    def make(size: int, *args: str, **kwargs: Any) -> Supervisor:
        sup = Supervisor(lambda: start_worker(*args, **kwargs), size)
        made.append(sup)
        return sup

    yield make
    for sup in made:
        sup._stop.set()


# ---- a private PostgreSQL cluster, for cases that stop or restart the server --------

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PRIVATE_PORT = int(os.environ.get("CAIRNQ_FAULTS_PG_PORT", "55432"))


class PrivateCluster:
    """A throw-away PostgreSQL 15 cluster owned by this test run (never the shared one)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "pg"
        self.log = root / "pg.log"
        self.url = f"postgres://postgres@127.0.0.1:{PRIVATE_PORT}/cairnq_faults"

    def _pg(self, *args: str, check: bool = True) -> int:
        import subprocess

        command = ["runuser", "-u", "postgres", "--", str(PG_BIN / args[0]), *args[1:]]
        result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {result.stdout}{result.stderr}")
        return result.returncode

    def ctl(self, action: str, *extra: str) -> None:
        opts = f"-p {PRIVATE_PORT} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._pg("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.log), "-w", action, *extra)

    def start(self) -> None:
        self.ctl("start")

    def stop(self, mode: str = "fast") -> None:
        self.ctl("stop", "-m", mode)

    def restart(self, mode: str = "fast") -> None:
        self.ctl("restart", "-m", mode)

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(
            f"host=127.0.0.1 port={PRIVATE_PORT} user=postgres dbname=cairnq_faults",
            autocommit=True,
        )

    def rows(self, ids: list[str]) -> list[Row]:
        with self.connect() as conn:
            found = conn.execute(
                "SELECT id, status, attempt, worker_id, lease_until_ms FROM cairnq_tasks"
                " WHERE id = ANY(%s)",
                [ids],
            ).fetchall()
        return [Row(*row) for row in found]


@pytest.fixture(scope="session")
def private_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    """Create, start and migrate a private cluster once per session; stop it at the end."""
    import shutil
    import subprocess
    import sys

    if not (PG_BIN / "initdb").exists() or shutil.which("runuser") is None:
        pytest.skip("PostgreSQL 15 binaries or runuser missing")
    root = Path(f"/tmp/cairnq-faults-{os.getpid()}")
    root.mkdir(mode=0o755, exist_ok=True)
    shutil.chown(root, "postgres")
    cluster = PrivateCluster(root)
    cluster._pg("initdb", "-D", str(cluster.data), "-A", "trust", "-U", "postgres")
    cluster.start()
    try:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "createdb"), "-h", "127.0.0.1",
             "-p", str(PRIVATE_PORT), "cairnq_faults"],
            check=True, capture_output=True, timeout=60,
        )
        env = dict(os.environ, DATABASE_URL=cluster.url, DJANGO_SETTINGS_MODULE="testproject.settings")
        repo = Path(__file__).resolve().parents[2]
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v", "0"],
            cwd=repo, env=env, check=True, capture_output=True, timeout=180,
        )
        yield cluster
    finally:
        cluster._pg("pg_ctl", "-D", str(cluster.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(root, ignore_errors=True)


def submit_private(cluster: PrivateCluster, name: str, payloads: list[dict[str, Any]]) -> list[str]:
    """Submit tasks to the private cluster through the product (``submit_many`` in a subprocess)."""
    import subprocess
    import sys

    code = (
        "import json,sys,django;django.setup();import cairnq_django as c;"
        "items=json.load(sys.stdin);"
        "rows=c.submit_many([(items['name'],p) for p in items['payloads']]);"
        "print(json.dumps([r.id for r in rows]))"
    )
    env = dict(os.environ, DATABASE_URL=cluster.url, DJANGO_SETTINGS_MODULE="testproject.settings")
    result = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps({"name": name, "payloads": payloads}),
        cwd=Path(__file__).resolve().parents[2],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])
