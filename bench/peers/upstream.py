"""The upstream cairnq Python SDK (``cairnq==0.15.1``, asyncio), driven through its public API.

Client: ``CairnQ.sqlite(path)`` / ``CairnQ.postgres(dsn)``. It has no bulk
submit, so "bulk" here is 256 submits awaited together with
``asyncio.gather`` (its SQLite store may group concurrent writes into one
commit). Worker: ``Worker.sqlite/postgres(..., queues=["bench"],
concurrency=N)`` with async no-op handlers (its native style, its best case)
and ``batch=256`` for the batch name; started with ``serve()``.

Run as ``python upstream.py client|worker --dialect D --db DB [...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

import _wire

QUEUE = "bench"


def _client(dialect: str, db: str) -> Any:
    import cairnq

    return cairnq.CairnQ.postgres(db) if dialect == "postgres" else cairnq.CairnQ.sqlite(db)


def client(dialect: str, db: str) -> None:
    loop = asyncio.new_event_loop()
    cq = _client(dialect, db)

    async def setup() -> None:
        # Connecting runs the SDK's own migrations: this installs the protocol
        # schema (also used for the raw-SQL peer's database).
        await cq.connect()

    async def enqueue_one(n: int) -> dict[str, float]:
        await cq.connect()
        start = _wire.now()
        for i in range(n):
            await cq.submit("bench.noop", {"i": i}, queue=QUEUE)
        return _wire.rate(n, _wire.now() - start)

    async def enqueue_bulk(n: int, chunk: int) -> dict[str, float]:
        await cq.connect()
        start = _wire.now()
        for lo in range(0, n, chunk):
            await asyncio.gather(
                *(cq.submit("bench.noop", {"i": i}, queue=QUEUE) for i in range(lo, min(n, lo + chunk)))
            )
        return _wire.rate(n, _wire.now() - start)

    async def submit(t: int, name: str = "bench.noop") -> dict[str, float]:
        await cq.submit(name, {"t": t}, queue=QUEUE)
        return {"t_after": _wire.now()}

    async def claim_cost(k: int) -> dict[str, Any]:
        await cq.connect()
        times = []
        for _ in range(k):
            start = _wire.now()
            got = await cq.store.claim(queues=[QUEUE], worker_id="worker_bench_probe", limit=1, names=["bench.noop"])
            times.append(_wire.now() - start)
            if not got:
                raise RuntimeError("claim returned nothing: probe tasks missing")
        return {
            "k": k,
            "median_ms": statistics.median(times) * 1000,
            "mean_ms": statistics.fmean(times) * 1000,
            "times_ms": [t * 1000 for t in times],
        }

    async def close() -> None:
        await cq.close()

    _wire.serve(
        {
            "setup": setup,
            "enqueue_one": enqueue_one,
            "enqueue_bulk": enqueue_bulk,
            "submit": submit,
            "claim_cost": claim_cost,
            "close": close,
        },
        loop=loop,
    )


def worker(dialect: str, db: str, concurrency: int, batch: int) -> None:
    import cairnq

    factory = cairnq.Worker.postgres if dialect == "postgres" else cairnq.Worker.sqlite
    w = factory(db, queues=[QUEUE], concurrency=concurrency)
    count = 0

    @w.task("bench.noop")
    async def noop(ctx: Any, payload: Any) -> None:
        nonlocal count
        count += 1
        _wire.started(payload, count)

    @w.task("bench.noop_batch", batch=batch)
    async def noop_batch(ctxs: list[Any]) -> None:
        nonlocal count
        count += len(ctxs)
        _wire.started(ctxs[0].payload, count)

    w.serve()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["client", "worker"])
    parser.add_argument("--dialect", required=True, choices=["postgres", "sqlite"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    if args.role == "client":
        client(args.dialect, args.db)
    else:
        worker(args.dialect, args.db, args.concurrency, args.batch)


if __name__ == "__main__":
    main()
