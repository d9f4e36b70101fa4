"""The harness's own access to databases: create them, empty, preload, poll and count.

Systems that share the protocol v1 tables (ours, upstream, raw) are reset,
preloaded and verified here with the statements in ``bench/sql``, so every one
of them starts a drain from identical rows. Other peers keep their own tables;
the harness only polls those (``*_live_exists`` / ``*_done``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
import _wire

QUEUE = "bench"


def pg_dsn(server: str, name: str) -> str:
    """Return the DSN of database ``name`` on the server at ``server`` (a DSN of any database)."""
    return psycopg.conninfo.make_conninfo(server, dbname=name)


def pg_url(server: str, name: str) -> str:
    """Return a ``postgresql://`` URL for ``name`` (asyncpg and Django settings take URLs)."""
    info = psycopg.conninfo.conninfo_to_dict(server)
    user = info.get("user", "root")
    host = info.get("host", "127.0.0.1")
    port = info.get("port", "5432")
    return f"postgresql://{user}@{host}:{port}/{name}"


def fresh_pg(server: str, name: str) -> None:
    """Drop and create database ``name`` (its name must start with ``bench_``)."""
    assert name.startswith("bench_"), name
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(psycopg.sql.Identifier(name)))
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))


def pg_exists(server: str, name: str) -> bool:
    with psycopg.connect(server, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None


def db_counters(server: str, name: str) -> dict[str, int]:
    """Return a database's cumulative commit and tuple counters (pg_stat_database)."""
    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute(_wire.sql("postgres", "db_counters"), {"name": name}).fetchone()
    return dict(zip(("xact_commit", "tup_inserted", "tup_updated", "tup_deleted"), (int(v) for v in row)))


def checkpoint(server: str) -> bool:
    """Run a CHECKPOINT on the server; False if this role may not."""
    with psycopg.connect(server, autocommit=True) as conn:
        try:
            conn.execute(_wire.sql("postgres", "checkpoint"))
        except psycopg.errors.InsufficientPrivilege:
            return False
    return True


def fresh_sqlite(path: str) -> None:
    """Delete a SQLite database and its WAL files."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(path + suffix)
        except FileNotFoundError:
            pass


class Tables:
    """One open connection to a database holding the protocol v1 tables."""

    def __init__(self, dialect: str, db: str) -> None:
        self.dialect = dialect
        if dialect == "postgres":
            self.conn: Any = psycopg.connect(db, autocommit=True)
        else:
            self.conn = sqlite3.connect(db, isolation_level=None, timeout=30)

    def close(self) -> None:
        self.conn.close()

    def run(self, name: str, params: dict[str, Any] | None = None, *, fetch: bool = False) -> list[Any]:
        """Run ``bench/sql/<dialect>/<name>.sql`` (SQLite: inside BEGIN IMMEDIATE ... COMMIT)."""
        text = _wire.sql(self.dialect, name)
        params = dict(params or {})
        if self.dialect == "postgres":
            cur = self.conn.execute(text, params or None)
            return cur.fetchall() if fetch else []
        params.setdefault("now", _wire.now_ms())
        if fetch:
            return self.conn.execute(text, params).fetchall()
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.execute(text, params)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return []

    def reset(self) -> None:
        self.run("delete_keys")
        self.run("delete_queue", {"queue": QUEUE})
        # Servers may run without autovacuum (this machine's does): without a
        # vacuum the deleted rows of earlier repetitions slow every later probe.
        if self.dialect == "postgres":
            self.conn.execute("VACUUM (ANALYZE) cairnq_tasks")
            self.conn.execute("VACUUM cairnq_task_keys")

    def reset_fleet(self) -> None:
        """Empty cairnq-django's fleet start log (its own table: only ``ours`` has it)."""
        self.run("delete_fleet_starts")
        if self.dialect == "postgres":
            self.conn.execute("VACUUM cairnq_django_fleet_start")

    def analyze(self) -> None:
        """Refresh PostgreSQL's statistics after a bulk load, as autovacuum would on a server that runs it.

        SQLite is left as the library leaves it: nothing there runs ANALYZE.
        """
        if self.dialect == "postgres":
            self.conn.execute("VACUUM (ANALYZE) cairnq_tasks")

    def preload(self, n: int, name: str, payload: dict[str, Any] | None = None) -> None:
        """Insert ``n`` due tasks, as many submits would, in chunks of 1,000."""
        body = json.dumps(payload) if payload is not None else None
        for lo in range(0, n, 1000):
            size = min(n, lo + 1000) - lo
            payloads = [body or json.dumps({"i": i}) for i in range(lo, lo + size)]
            if self.dialect == "postgres":
                ids = [_wire.task_id() for _ in payloads]
                self.run("raw_insert_many", {"ids": ids, "payloads": payloads, "name": name, "queue": QUEUE})
            else:
                stamp = _wire.now_ms()
                rows = [
                    {"id": _wire.task_id(), "name": name, "queue": QUEUE, "payload": p, "now": stamp} for p in payloads
                ]
                self.conn.execute("BEGIN IMMEDIATE")
                self.conn.executemany(_wire.sql("sqlite", "raw_insert_many"), rows)
                self.conn.execute("COMMIT")

    def live(self) -> bool:
        return bool(self.run("live_exists", {"queue": QUEUE}, fetch=True)[0][0])

    def counts(self) -> dict[str, int]:
        return {status: int(n) for status, n in self.run("count_by_status", {"queue": QUEUE}, fetch=True)}

    def fill_history(self, terminal: int, backoff: int) -> None:
        """Fill the queue with ``terminal`` finished rows and ``backoff`` future-due queued rows."""
        self.run("fill_terminal", {"n": terminal, "queue": QUEUE, "name": "bench.noop"})
        self.run("fill_backoff", {"n": backoff, "queue": QUEUE, "name": "bench.noop"})
        # Settle the bulk load before timing anything: PostgreSQL sets hint bits
        # and the visibility map, SQLite folds the WAL back into the file.
        if self.dialect == "postgres":
            self.conn.execute("VACUUM (ANALYZE) cairnq_tasks")
        else:
            self.conn.execute("ANALYZE")
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def delete_probes(self) -> None:
        self.run("delete_probes", {"queue": QUEUE})


class Foreign:
    """A connection to a peer with its own tables; only polls ``<prefix>_live_exists`` / ``<prefix>_done``."""

    def __init__(self, dialect: str, db: str, prefix: str) -> None:
        self.dialect = dialect
        self.prefix = prefix
        if dialect == "postgres":
            self.conn: Any = psycopg.connect(db, autocommit=True)
        else:
            self.conn = sqlite3.connect(db, isolation_level=None, timeout=30)

    def close(self) -> None:
        self.conn.close()

    def _one(self, name: str) -> Any:
        return self.conn.execute(_wire.sql(self.dialect, f"{self.prefix}_{name}")).fetchone()[0]

    def live(self) -> bool:
        return bool(self._one("live_exists"))

    def counts(self) -> dict[str, int]:
        return {"succeeded": int(self._one("done"))}
