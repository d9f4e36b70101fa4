"""Plumbing of ``fleet_scale.py``: a fleet of worker processes, client processes, server-side samplers.

Everything talks to real processes and to the server's own statistics
(``pg_stat_activity``, ``pg_stat_database``, ``pg_stat_user_tables``); the
harness's connections carry ``application_name = bench_harness`` and are
left out of every count.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

import _tables  # noqa: F401 - puts bench/peers on the path
import _wire  # bench/peers, put on the path by _tables
from _harness import BENCH, REPO, Worker, peer_env, tail

PYTHON = str(REPO / ".venv" / "bin" / "python")
HARNESS_APP = "bench_harness"


def connect(dsn: str) -> psycopg.Connection[Any]:
    """Open an autocommit connection the counts below leave out."""
    return psycopg.connect(dsn, autocommit=True, application_name=HARNESS_APP)


def project_env(db_url: str, pooler: str = "", listen: str = "") -> dict[str, str]:
    """Return the environment of a bench-project process (worker or client)."""
    env = {
        "BENCH_DIALECT": "postgres",
        "BENCH_DB": db_url,
        "BENCH_SCALE": "1",
        "DJANGO_SETTINGS_MODULE": "ours_project.settings",
    }
    if pooler:
        env["BENCH_POOLER"] = pooler
    if listen:
        env["BENCH_LISTEN"] = listen
    return env


def migrate(env: dict[str, str], log: Path) -> None:
    with open(log, "ab") as out:
        subprocess.run(
            [PYTHON, str(REPO / "manage.py"), "migrate", "-v", "0"],
            env=peer_env(env),
            cwd=str(BENCH),
            stdout=out,
            stderr=subprocess.STDOUT,
            check=True,
        )


class Fleet:
    """K ``manage.py cairnq_worker`` processes, started together and waited for until each is claiming."""

    def __init__(self, k: int, concurrency: int, env: dict[str, str], logs: Path, tag: str, extra: list[str]) -> None:
        argv = [PYTHON, str(REPO / "manage.py"), "cairnq_worker", "--queue", "bench", "--concurrency", str(concurrency)]
        self.workers = [Worker(argv + extra, logs / f"{tag}-worker{i}.log", env) for i in range(k)]

    def wait_ready(self, timeout: float = 300.0) -> float:
        """Wait until every worker printed its banner (its last line before the first claim)."""
        start = time.monotonic()
        pending = list(self.workers)
        while pending:
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"{len(pending)} workers not up within {timeout:.0f}s: {tail(pending[0].log)}")
            for w in list(pending):
                if not w.alive():
                    raise RuntimeError(f"worker exited ({w.proc.returncode}): {tail(w.log)}")
                if "wake-ups:" in w.log.read_text(errors="replace"):
                    pending.remove(w)
            time.sleep(0.2)
        return time.monotonic() - start

    def check_alive(self) -> None:
        for w in self.workers:
            if not w.alive():
                raise RuntimeError(f"worker exited ({w.proc.returncode}): {tail(w.log)}")

    def banner(self) -> str:
        """The first worker's wake-up line, as printed."""
        for line in self.workers[0].log.read_text(errors="replace").splitlines():
            if "wake-ups:" in line:
                return line.strip()
        return ""

    def stop(self, grace: float = 30.0) -> list[int]:
        """SIGTERM every worker once, then wait for all (SIGKILL after ``grace``); return the exit codes.

        All at once, since sixteen graces in turn would add up; and once, since
        a second SIGTERM asks a worker to stop without waiting for its calls.
        """
        for w in self.workers:
            if w.alive():
                w.proc.terminate()
        deadline = time.monotonic() + grace
        for w in self.workers:
            try:
                w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            w._out.close()
        return [w.proc.returncode for w in self.workers]


class Clients:
    """Client processes of ``_scale_client.py``, released together by one line on stdin."""

    def __init__(self, argvs: list[list[str]], env: dict[str, str], logs: Path, tag: str) -> None:
        self.logs = [logs / f"{tag}-client{i}.log" for i in range(len(argvs))]
        self._errs = [open(log, "ab") for log in self.logs]  # noqa: SIM115 - closed in results()
        self.procs = [
            subprocess.Popen(
                [PYTHON, str(BENCH / "_scale_client.py"), *argv],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=peer_env(env),
                cwd=str(BENCH),
                text=True,
            )
            for argv, err in zip(argvs, self._errs)
        ]

    def go(self) -> None:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()

    def done(self) -> bool:
        return all(p.poll() is not None for p in self.procs)

    def results(self, timeout: float = 1800) -> list[dict[str, Any]]:
        out = []
        for p, log in zip(self.procs, self.logs):
            stdout, _ = p.communicate(timeout=timeout)
            line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
            out.append(json.loads(line) if line else {"fatal": f"no answer ({p.returncode}): {tail(log)}"})
        for err in self._errs:
            err.close()
        return out


class ActivitySampler:
    """Sample the server connections to one database every ``interval`` seconds, from a thread."""

    def __init__(self, dsn: str, dbname: str, interval: float = 0.1) -> None:
        self.conn = connect(dsn)
        self.dbname = dbname
        self.interval = interval
        self.samples: list[dict[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ActivitySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.conn.close()

    def _run(self) -> None:
        query = _wire.sql("postgres", "scale_activity")
        while not self._stop.is_set():
            rows = self.conn.execute(query, {"name": self.dbname, "harness": HARNESS_APP}).fetchall()
            by_state = {state: int(n) for state, n in rows}
            by_state["total"] = sum(by_state.values())
            self.samples.append(by_state)
            self._stop.wait(self.interval)

    def summary(self) -> dict[str, Any]:
        states = sorted({k for s in self.samples for k in s})
        return {
            "samples": len(self.samples),
            "max": {k: max(s.get(k, 0) for s in self.samples) for k in states},
        }


def wal_lsn(conn: Any) -> str:
    """The server's current WAL write position."""
    return conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]


def wal_bytes_since(conn: Any, lsn: str) -> int:
    """WAL the whole server wrote since ``lsn`` (every database's, not this one's alone)."""
    return int(conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", [lsn]).fetchone()[0])


def db_counters(conn: psycopg.Connection[Any], dbname: str) -> dict[str, int]:
    row = conn.execute(_wire.sql("postgres", "db_counters"), {"name": dbname}).fetchone()
    assert row is not None
    return dict(zip(("xact_commit", "tup_inserted", "tup_updated", "tup_deleted"), (int(v) for v in row)))


def table_stats(conn: psycopg.Connection[Any], table: str) -> dict[str, int]:
    # Cumulative statistics are cached per transaction; autocommit reads fresh ones.
    row = conn.execute(_wire.sql("postgres", "scale_table_stats"), {"table": table}).fetchone()
    assert row is not None
    keys = ("n_live_tup", "n_dead_tup", "n_tup_upd", "n_tup_hot_upd", "total_bytes", "autovacuum_count")
    return dict(zip(keys, (int(v) for v in row)))


def top_statements(conn: psycopg.Connection[Any], limit: int = 12) -> list[dict[str, Any]]:
    """The statements that took the most server time since the last ``pg_stat_statements_reset()``."""
    rows = conn.execute(_wire.sql("postgres", "scale_top_statements"), {"limit": limit}).fetchall()
    keys = ("calls", "total_ms", "mean_ms", "max_ms", "rows", "blocks", "blocks_read", "query")
    return [dict(zip(keys, row)) for row in rows]


def load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
