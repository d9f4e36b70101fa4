"""procrastinate 3.10 (PostgreSQL only), driven through its own CLI and API.

Schema: ``procrastinate --app=procr.app schema --apply``. Client:
``noop.defer(i=...)`` one at a time and ``noop.batch_defer(...)`` for bulk.
Worker: ``procrastinate --app=procr.app worker --queues bench --concurrency N``
(LISTEN/NOTIFY on, its default). It has no batch handler.

The app is built at import from ``BENCH_DB`` (the harness sets it for both the
client and the worker), because the CLI loads it by dotted path.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any

import _wire

try:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("BENCH_DB", "")))
except ImportError:  # imported outside its virtualenv
    app = None

_count = 0

if app is not None:

    @app.task(name="bench.noop", queue="bench")
    async def noop(i: int | None = None, t: int | None = None) -> None:
        global _count
        _count += 1
        _wire.started({"t": t} if t is not None else None, _count)


def client(db: str) -> None:
    assert app is not None
    os.environ["BENCH_DB"] = db

    def setup() -> None:
        cli = os.path.join(os.path.dirname(sys.executable), "procrastinate")
        subprocess.run(
            [cli, "--app=procr.app", "schema", "--apply"],
            check=True,
            env={**os.environ, "BENCH_DB": db},
            stdout=sys.stderr,
        )

    def reset() -> None:
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(_wire.sql("postgres", "procr_reset"))

    def enqueue_one(n: int) -> dict[str, float]:
        start = _wire.now()
        for i in range(n):
            noop.defer(i=i)
        return _wire.rate(n, _wire.now() - start)

    def enqueue_bulk(n: int, chunk: int) -> dict[str, float]:
        start = _wire.now()
        for lo in range(0, n, chunk):
            noop.batch_defer(*({"i": i} for i in range(lo, min(n, lo + chunk))))
        return _wire.rate(n, _wire.now() - start)

    def preload(n: int, name: str, payload_bytes: int = 0) -> None:
        enqueue_bulk(n, 1000)

    def submit(t: int, name: str = "") -> dict[str, Any]:
        noop.defer(t=t)
        return {"t_after": _wire.now()}

    with app.open():
        _wire.serve(
            {
                "setup": setup,
                "reset": reset,
                "enqueue_one": enqueue_one,
                "enqueue_bulk": enqueue_bulk,
                "preload": preload,
                "submit": submit,
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["client"])
    parser.add_argument("--dialect", default="postgres", choices=["postgres"])
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    client(args.db)


if __name__ == "__main__":
    main()
