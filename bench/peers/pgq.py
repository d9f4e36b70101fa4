"""pgqueuer (PostgreSQL only), driven through its own CLI and API.

Schema: ``pgq install`` (its CLI). Client: ``Queries(AsyncpgDriver(conn))``;
``enqueue(name, payload)`` one at a time and ``enqueue([names], [payloads],
[priorities])`` for bulk. Worker: ``pgq run pgq:factory --batch-size B``
with an async no-op entrypoint. pgqueuer has no batch handler: ``batch_size``
is how many jobs one dequeue takes (and how many outcomes one log write
groups), so "batch 256" means ``--batch-size 256`` with per-job handlers,
and "single" means ``--batch-size 1``.

Run as ``python pgq.py client|worker --db DSN [--batch-size B]``. The worker
calls ``pgqueuer.run(factory, batch_size=B)``, the supervisor behind
``pgq run``: the 1.6.0 CLI's ``run`` command fails before starting in this
environment (its log-level option reaches ``setup_fancy_logger`` as a plain
string), so the harness calls the same function directly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import _wire

NAME = "bench.noop"


def client(db: str) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    loop = asyncio.new_event_loop()
    state: dict[str, Any] = {}

    async def queries() -> Any:
        if "q" not in state:
            state["conn"] = await asyncpg.connect(db)
            state["q"] = Queries(AsyncpgDriver(state["conn"]))
        return state["q"]

    def setup() -> None:
        pgq = os.path.join(os.path.dirname(sys.executable), "pgq")
        subprocess.run([pgq, "install"], check=True, env={**os.environ, "PGDSN": db}, stdout=sys.stderr)

    async def reset() -> None:
        q = await queries()
        await state["conn"].execute(_wire.sql("postgres", "pgq_reset"))
        del q

    async def enqueue_one(n: int) -> dict[str, float]:
        q = await queries()
        start = _wire.now()
        for i in range(n):
            await q.enqueue(NAME, json.dumps({"i": i}).encode())
        return _wire.rate(n, _wire.now() - start)

    async def enqueue_bulk(n: int, chunk: int) -> dict[str, float]:
        q = await queries()
        start = _wire.now()
        for lo in range(0, n, chunk):
            size = min(n, lo + chunk) - lo
            await q.enqueue([NAME] * size, [json.dumps({"i": i}).encode() for i in range(lo, lo + size)], [0] * size)
        return _wire.rate(n, _wire.now() - start)

    async def preload(n: int, name: str, payload_bytes: int = 0) -> None:
        await enqueue_bulk(n, 1000)

    async def submit(t: int, name: str = NAME) -> dict[str, float]:
        q = await queries()
        await q.enqueue(NAME, json.dumps({"t": t}).encode())
        return {"t_after": _wire.now()}

    _wire.serve(
        {
            "setup": setup,
            "reset": reset,
            "enqueue_one": enqueue_one,
            "enqueue_bulk": enqueue_bulk,
            "preload": preload,
            "submit": submit,
        },
        loop=loop,
    )


@contextlib.asynccontextmanager
async def factory() -> AsyncIterator[Any]:
    """Build the PgQueuer the ``pgq run`` CLI serves (reads ``PGDSN``)."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, PgQueuer
    from pgqueuer.models import Job

    conn = await asyncpg.connect(os.environ["PGDSN"])
    pgq = PgQueuer(AsyncpgDriver(conn))
    count = 0

    @pgq.entrypoint(NAME)
    async def noop(job: Job) -> None:
        nonlocal count
        count += 1
        _wire.started(json.loads(job.payload) if job.payload else None, count)

    try:
        yield pgq
    finally:
        await conn.close()


def worker(db: str, batch_size: int) -> None:
    from datetime import timedelta

    import pgqueuer

    os.environ["PGDSN"] = db
    asyncio.run(pgqueuer.run(factory, batch_size=batch_size, dequeue_timeout=timedelta(seconds=30)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["client", "worker"])
    parser.add_argument("--dialect", default="postgres", choices=["postgres"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    if args.role == "client":
        client(args.db)
    else:
        worker(args.db, args.batch_size)


if __name__ == "__main__":
    main()
