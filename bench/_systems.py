"""The systems under test: where each lives, how its client and worker start, what it supports.

Each peer is installed from PyPI into ``bench/.venvs/<key>`` (pinned
versions below) and run as real separate processes; cairnq-django runs from
the repository's own virtualenv (``.venv``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from _harness import BENCH, CODE, PEERS, REPO

VENVS = BENCH / ".venvs"
PY311 = "python3.11"
PY312 = "python3.12"


@dataclass(frozen=True)
class Mode:
    """One way to drain: single-task handlers at a concurrency, or batch handlers."""

    key: str  # column name: "c1", "c8", "batch256"
    batch: int  # 1 = single-task handler
    concurrency: int
    # The fleet metric's modes (ours only): the worker registers the fleet
    # handlers too and serves this one name (--task), so a drain with a
    # limit and one without differ in nothing else.
    task: str | None = None
    # ``--claim-ahead`` for ours' worker; None leaves the default ("auto").
    claim_ahead: str | None = None

    @property
    def task_name(self) -> str:
        if self.task is not None:
            return self.task
        return "bench.noop" if self.batch == 1 else "bench.noop_batch"


C1 = Mode("c1", 1, 1)
CN = Mode("c8", 1, 8)
BATCH = Mode("batch256", 256, 1)


@dataclass
class System:
    key: str
    label: str
    dialects: tuple[str, ...]
    client: Callable[[str, str], list[str]]
    worker: Callable[[str, str, Mode], list[str]]
    modes: tuple[Mode, ...]
    venv: str | None = None  # folder under bench/.venvs; None = the repository's .venv
    requirements: tuple[str, ...] = ()
    base_python: str = PY311
    protocol_tables: bool = False  # shares the cairnq v1 tables: harness preloads/polls, claim cost applies
    schema_by: str = "self"  # "self": the client's ``setup``; "upstream": the upstream SDK's connect
    foreign_prefix: str = ""  # SQL prefix for peers with their own tables
    bulk: bool = True
    paced: bool = False  # drains with the smaller N in every mode (too slow for 10,000 within the run's budget)
    notes: list[str] = field(default_factory=list)

    @property
    def python(self) -> str:
        if self.venv is None:
            return str(REPO / ".venv" / "bin" / "python")
        return str(VENVS / self.venv / "bin" / "python")

    def ensure_venv(self, log: Path) -> None:
        """Create the peer's virtualenv and install its pinned requirements, once."""
        if self.venv is None:
            return
        marker = VENVS / self.venv / ".bench-installed"
        wanted = "\n".join(self.requirements)
        if marker.exists() and marker.read_text() == wanted:
            return
        with open(log, "ab") as out:
            base = _find_python(self.base_python)
            subprocess.run([base, "-m", "venv", str(VENVS / self.venv)], check=True, stdout=out, stderr=out)
            subprocess.run(
                [self.python, "-m", "pip", "install", "-q", *self.requirements], check=True, stdout=out, stderr=out
            )
        marker.write_text(wanted)


def _find_python(name: str) -> str:
    """Return an interpreter for ``name`` (PATH first, then pyenv's versions)."""
    import shutil

    found = shutil.which(name)
    if found:
        try:
            subprocess.run([found, "-c", ""], check=True, capture_output=True)
            return found
        except subprocess.CalledProcessError:
            pass
    for candidate in sorted(Path.home().glob(f".pyenv/versions/{name[6:]}*/bin/{name}"), reverse=True):
        return str(candidate)
    if name == PY311:
        return sys.executable
    raise FileNotFoundError(f"no {name} interpreter found (needed for a peer's virtualenv)")


def _peer_argv(system_key: str, script: str) -> Callable[[str, str], list[str]]:
    def argv(dialect: str, db: str) -> list[str]:
        return [SYSTEMS[system_key].python, str(PEERS / script), "client", "--dialect", dialect, "--db", db]

    return argv


def _ours_worker(dialect: str, db: str, mode: Mode) -> list[str]:
    return [
        SYSTEMS["ours"].python,
        str(CODE / "manage.py"),
        "cairnq_worker",
        "--queue",
        "bench",
        "--concurrency",
        str(mode.concurrency),
    ] + (["--task", mode.task] if mode.task is not None else []) + (
        ["--claim-ahead", mode.claim_ahead] if mode.claim_ahead is not None else []
    )


def _upstream_worker(dialect: str, db: str, mode: Mode) -> list[str]:
    return [
        SYSTEMS["upstream"].python,
        str(PEERS / "upstream.py"),
        "worker",
        "--dialect",
        dialect,
        "--db",
        db,
        "--concurrency",
        str(mode.concurrency),
        "--batch",
        str(max(mode.batch, 1)),
    ]


def _raw_worker(dialect: str, db: str, mode: Mode) -> list[str]:
    return [
        SYSTEMS["raw"].python,
        str(PEERS / "raw.py"),
        "worker",
        "--dialect",
        dialect,
        "--db",
        db,
        "--batch",
        str(mode.batch),
    ]


def _pgq_worker(dialect: str, db: str, mode: Mode) -> list[str]:
    return [SYSTEMS["pgqueuer"].python, str(PEERS / "pgq.py"), "worker", "--db", db, "--batch-size", str(mode.batch)]


def _procr_worker(dialect: str, db: str, mode: Mode) -> list[str]:
    return [
        str(VENVS / "procrastinate" / "bin" / "procrastinate"),
        "--app=procr.app",
        "worker",
        "--queues",
        "bench",
        "--concurrency",
        str(mode.concurrency),
    ]


def _djtasks_worker(dialect: str, db: str, mode: Mode) -> list[str]:
    return [str(VENVS / "djtasks" / "bin" / "django-admin"), "db_worker", "--no-startup-delay"]


SYSTEMS: dict[str, System] = {
    "ours": System(
        key="ours",
        label="cairnq-django",
        dialects=("postgres", "sqlite"),
        client=lambda dialect, db: [
            SYSTEMS["ours"].python,
            str(BENCH / "ours.py"),
            "client",
            "--dialect",
            dialect,
            "--db",
            db,
        ],
        worker=_ours_worker,
        modes=(C1, CN, BATCH),
        protocol_tables=True,
    ),
    "upstream": System(
        key="upstream",
        label="cairnq 0.15.1 (upstream SDK)",
        dialects=("postgres", "sqlite"),
        client=_peer_argv("upstream", "upstream.py"),
        worker=_upstream_worker,
        modes=(C1, CN, BATCH),
        venv="upstream",
        requirements=("cairnq[postgres]==0.15.1",),
        protocol_tables=True,
        notes=["bulk = 1,000 submits awaited together with asyncio.gather (no bulk API)"],
    ),
    "pgqueuer": System(
        key="pgqueuer",
        label="pgqueuer 1.6.0",
        dialects=("postgres",),
        client=_peer_argv("pgqueuer", "pgq.py"),
        worker=_pgq_worker,
        modes=(C1, BATCH),
        venv="pgqueuer",
        requirements=("pgqueuer==1.6.0", "asyncpg"),
        foreign_prefix="pgq",
        notes=["c1 = --batch-size 1, batch256 = --batch-size 256 (per-job async handlers; no batch handler)"],
    ),
    "procrastinate": System(
        key="procrastinate",
        label="procrastinate 3.10",
        dialects=("postgres",),
        client=_peer_argv("procrastinate", "procr.py"),
        worker=_procr_worker,
        modes=(C1, CN),
        venv="procrastinate",
        requirements=("procrastinate==3.10.0",),
        foreign_prefix="procr",
        paced=True,
        notes=["per-job async handlers; no batch handler; drains use the smaller N"],
    ),
    "djtasks": System(
        key="djtasks",
        label="Django 6.1 tasks + django-tasks-db 0.13",
        dialects=("postgres", "sqlite"),
        client=_peer_argv("djtasks", "djtasks.py"),
        worker=_djtasks_worker,
        modes=(C1,),
        venv="djtasks",
        requirements=("Django==6.1.3", "django-tasks-db==0.13.0", "psycopg[binary]"),
        base_python=PY312,
        foreign_prefix="djtasks",
        bulk=False,
        paced=True,
        notes=["db_worker runs one task at a time; no bulk enqueue; drains use the smaller N"],
    ),
    "raw": System(
        key="raw",
        label="raw SQL ceiling (psycopg 3 / sqlite3)",
        dialects=("postgres", "sqlite"),
        client=_peer_argv("raw", "raw.py"),
        worker=_raw_worker,
        modes=(C1, BATCH),
        venv="raw",
        requirements=("psycopg[binary]",),
        protocol_tables=True,
        schema_by="upstream",
        notes=["claim + one settle statement; no heartbeat, recovery or retry"],
    ),
}

ORDER = ("ours", "upstream", "pgqueuer", "procrastinate", "djtasks", "raw")


def worker_env(system: System, dialect: str, db: str, mode: Mode) -> dict[str, str]:
    """Return the extra environment of a worker process."""
    env = {"BENCH_DIALECT": dialect, "BENCH_DB": db, "BENCH_BATCH": str(max(mode.batch, 1))}
    if system.key == "ours":
        env["DJANGO_SETTINGS_MODULE"] = "ours_project.settings"
        if mode.task is not None:
            env["BENCH_FLEET"] = "1"
    if system.key == "djtasks":
        env["DJANGO_SETTINGS_MODULE"] = "djtasks_project.settings"
    return env
