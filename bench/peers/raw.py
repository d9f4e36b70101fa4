"""The raw-SQL ceiling: the least work a protocol v1 queue can do per task.

It claims up to ``batch`` due tasks with one statement and settles all of
them with one more (each row keeping its own ownership check and cancel-wins
outcome). The worker sends the settle of one batch and the claim of the next
in one transaction, so each batch costs a single commit. No heartbeat, no lease recovery, no retries: it shows what the
tables themselves allow, not a usable worker. psycopg 3 on PostgreSQL, the
standard library's sqlite3 on SQLite. The schema is the protocol's (installed
by the upstream SDK for this peer).

Run as ``python raw.py client --dialect D --db DB`` (JSON-lines driver) or
``python raw.py worker --dialect D --db DB --batch N``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import time
from typing import Any

import _wire

QUEUE = "bench"
WORKER = "worker_raw"
LEASE_MS = 30_000


class _Pg:
    def __init__(self, dsn: str) -> None:
        import psycopg

        self.psycopg = psycopg
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.dsn = dsn

    def insert_one(self, name: str, payload: str) -> str:
        tid = _wire.task_id()
        self.conn.execute(
            _wire.sql("postgres", "raw_insert_one"), {"id": tid, "name": name, "queue": QUEUE, "payload": payload}
        )
        return tid

    def insert_many(self, name: str, payloads: list[str]) -> None:
        # COPY: the fastest way PostgreSQL takes rows, so the ceiling for bulk.
        with self.conn.transaction(), self.conn.cursor() as cur:
            (now,) = cur.execute(_wire.sql("postgres", "raw_now_ms")).fetchone()
            with cur.copy(_wire.sql("postgres", "raw_copy_tasks")) as copy:
                for payload in payloads:
                    tid = _wire.task_id()
                    copy.write_row((tid, name, QUEUE, "queued", payload, "{}", 3, 0, now, tid, now, now))

    def claim(self, limit: int) -> list[tuple[str, Any]]:
        # Autocommit: the claim statement is its own short transaction.
        return self.conn.execute(
            _wire.sql("postgres", "raw_claim"),
            {"queue": QUEUE, "worker": WORKER, "lease_ms": LEASE_MS, "limit": limit},
        ).fetchall()

    def settle(self, ids: list[str]) -> int:
        rows = self.conn.execute(_wire.sql("postgres", "raw_settle_many"), {"ids": ids, "worker": WORKER}).fetchall()
        return len(rows)

    def cycle(self, settle: list[str], limit: int) -> list[tuple[str, Any]]:
        """Settle the previous batch and claim the next one in one transaction."""
        with self.conn.transaction():
            if settle:
                self.conn.execute(_wire.sql("postgres", "raw_settle_many"), {"ids": settle, "worker": WORKER})
            return self.conn.execute(
                _wire.sql("postgres", "raw_claim"),
                {"queue": QUEUE, "worker": WORKER, "lease_ms": LEASE_MS, "limit": limit},
            ).fetchall()

    def reset(self) -> None:
        self.conn.execute(_wire.sql("postgres", "delete_keys"))
        self.conn.execute(_wire.sql("postgres", "delete_queue"), {"queue": QUEUE})

    def waiter(self) -> Any:
        # A second connection LISTENs on the protocol's channel (the trigger is
        # in the schema), so an idle worker wakes at the submit's commit.
        listen = self.psycopg.connect(self.dsn, autocommit=True)
        listen.execute("LISTEN cairnq_queued")

        def wait(timeout: float) -> None:
            for _ in listen.notifies(timeout=timeout, stop_after=1):
                pass

        return wait


class _Lite:
    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=5)
        self.conn.execute("PRAGMA journal_mode=WAL")

    def _write(self, name: str, params: Any, many: bool = False) -> list[Any]:
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            if many:
                cur.executemany(_wire.sql("sqlite", name), params)
                rows: list[Any] = []
            else:
                rows = cur.execute(_wire.sql("sqlite", name), params).fetchall()
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return rows

    def insert_one(self, name: str, payload: str) -> str:
        tid = _wire.task_id()
        self._write(
            "raw_insert_one", {"id": tid, "name": name, "queue": QUEUE, "payload": payload, "now": _wire.now_ms()}
        )
        return tid

    def insert_many(self, name: str, payloads: list[str]) -> None:
        now = _wire.now_ms()
        rows = [{"id": _wire.task_id(), "name": name, "queue": QUEUE, "payload": p, "now": now} for p in payloads]
        self._write("raw_insert_many", rows, many=True)

    def claim(self, limit: int) -> list[tuple[str, Any]]:
        return self._write(
            "raw_claim",
            {"queue": QUEUE, "worker": WORKER, "lease_ms": LEASE_MS, "limit": limit, "now": _wire.now_ms()},
        )

    def settle(self, ids: list[str]) -> int:
        return len(self._write("raw_settle_many", {"ids": json.dumps(ids), "worker": WORKER, "now": _wire.now_ms()}))

    def cycle(self, settle: list[str], limit: int) -> list[tuple[str, Any]]:
        """Settle the previous batch and claim the next one under one BEGIN IMMEDIATE."""
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            now = _wire.now_ms()
            if settle:
                cur.execute(
                    _wire.sql("sqlite", "raw_settle_many"), {"ids": json.dumps(settle), "worker": WORKER, "now": now}
                ).fetchall()
            rows = cur.execute(
                _wire.sql("sqlite", "raw_claim"),
                {"queue": QUEUE, "worker": WORKER, "lease_ms": LEASE_MS, "limit": limit, "now": now},
            ).fetchall()
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return rows

    def reset(self) -> None:
        self._write("delete_keys", {})
        self._write("delete_queue", {"queue": QUEUE})

    def waiter(self) -> Any:
        # SQLite has no push channel; poll briefly.
        return lambda timeout: time.sleep(min(timeout, 0.005))


def _open(dialect: str, db: str) -> Any:
    return _Pg(db) if dialect == "postgres" else _Lite(db)


def client(dialect: str, db: str) -> None:
    store = _open(dialect, db)

    def reset() -> None:
        store.reset()

    def enqueue_one(n: int) -> dict[str, float]:
        start = _wire.now()
        for i in range(n):
            store.insert_one("bench.noop", json.dumps({"i": i}))
        return _wire.rate(n, _wire.now() - start)

    def enqueue_bulk(n: int, chunk: int) -> dict[str, float]:
        start = _wire.now()
        for lo in range(0, n, chunk):
            store.insert_many("bench.noop", [json.dumps({"i": i}) for i in range(lo, min(n, lo + chunk))])
        return _wire.rate(n, _wire.now() - start)

    def submit(t: int, name: str = "bench.noop") -> dict[str, float]:
        store.insert_one(name, json.dumps({"t": t}))
        return {"t_after": _wire.now()}

    def claim_cost(k: int) -> dict[str, Any]:
        times = []
        for _ in range(k):
            start = _wire.now()
            got = store.claim(1)
            times.append(_wire.now() - start)
            if not got:
                raise RuntimeError("claim returned nothing: probe tasks missing")
        return {
            "k": k,
            "median_ms": statistics.median(times) * 1000,
            "mean_ms": statistics.fmean(times) * 1000,
            "times_ms": [t * 1000 for t in times],
        }

    _wire.serve(
        {
            "reset": reset,
            "enqueue_one": enqueue_one,
            "enqueue_bulk": enqueue_bulk,
            "submit": submit,
            "claim_cost": claim_cost,
        }
    )


def worker(dialect: str, db: str, batch: int) -> None:
    store = _open(dialect, db)
    wait = store.waiter()
    count = 0
    done: list[str] = []
    while True:
        rows = store.cycle(done, batch)
        done = []
        if not rows:
            wait(0.5)
            continue
        for tid, payload in rows:
            payload = json.loads(payload) if isinstance(payload, str) else payload
            count += 1
            _wire.started(payload, count)
            done.append(tid)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["client", "worker"])
    parser.add_argument("--dialect", required=True, choices=["postgres", "sqlite"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    if args.role == "client":
        client(args.dialect, args.db)
    else:
        worker(args.dialect, args.db, args.batch)


if __name__ == "__main__":
    main()
