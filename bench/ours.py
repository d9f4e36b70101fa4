"""cairnq-django (this repository), driven through its documented public API.

Client: ``cairnq.submit(name, payload, queue=...)`` one at a time and
``cairnq.submit_many([...])`` for bulk, on the bench-only project in
``bench/ours_project`` (handlers in its ``tasks.py``). Delayed tasks
(lateness) go through ``cairnq.submit(..., delay_ms=...)``. Claim cost calls the
store's own claim (``get_store().claim``), the path the worker takes; the
fleet metric's keyed claim calls ``claim_session`` with a limited draw, as a
worker's planner does. Worker:
``python manage.py cairnq_worker --queue bench --concurrency N`` on those
settings, started by the harness.

Run as ``python bench/ours.py client --dialect D --db DB`` with the repository's
virtualenv (the harness sets ``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import _wire

QUEUE = "bench"


def client(dialect: str, db: str) -> None:
    os.environ["BENCH_DIALECT"] = dialect
    os.environ["BENCH_DB"] = db
    os.environ["DJANGO_SETTINGS_MODULE"] = "ours_project.settings"
    import django

    django.setup()
    from django.core.management import call_command

    import cairnq_django as cairnq

    def setup() -> None:
        call_command("migrate", verbosity=0)

    def enqueue_one(n: int) -> dict[str, float]:
        start = _wire.now()
        for i in range(n):
            cairnq.submit("bench.noop", {"i": i}, queue=QUEUE)
        return _wire.rate(n, _wire.now() - start)

    def enqueue_bulk(n: int, chunk: int) -> dict[str, float]:
        start = _wire.now()
        for lo in range(0, n, chunk):
            cairnq.submit_many([("bench.noop", {"i": i}) for i in range(lo, min(n, lo + chunk))], queue=QUEUE)
        return _wire.rate(n, _wire.now() - start)

    def submit(t: int, name: str = "bench.noop") -> dict[str, float]:
        cairnq.submit(name, {"t": t}, queue=QUEUE)
        return {"t_after": _wire.now()}

    def submit_delayed(tasks: list[list[int]]) -> dict[str, Any]:
        # [tag, delay_ms] pairs; each run_at comes back on the monotonic clock
        # handlers report in (the stored run_at_ms is wall-clock milliseconds).
        # One transaction, so the worker's claims never queue behind a stream
        # of inserts (on SQLite that is a write-lock wait, not a wake-up).
        rows = cairnq.submit_many(
            [{"name": "bench.noop", "payload": {"t": tag}, "delay_ms": delay_ms} for tag, delay_ms in tasks],
            queue=QUEUE,
        )
        wall_ms, mono = time.time() * 1000, _wire.now()
        run_at = {row.payload["t"]: mono + (row.run_at_ms - wall_ms) / 1000 for row in rows}
        return {"run_at": {str(tag): at for tag, at in run_at.items()}}

    def claim_cost(k: int) -> dict[str, Any]:
        from cairnq_django.store import get_store

        store = get_store()
        times = []
        for _ in range(k):
            start = _wire.now()
            got = store.claim([QUEUE], "worker_bench_probe", limit=1, names=["bench.noop"])
            times.append(_wire.now() - start)
            if not got:
                raise RuntimeError("claim returned nothing: probe tasks missing")
        return {
            "k": k,
            "median_ms": statistics.median(times) * 1000,
            "mean_ms": statistics.fmean(times) * 1000,
            "times_ms": [t * 1000 for t in times],
        }

    def submit_keyed(keys: int, per_key: int) -> dict[str, int]:
        # Through submit_many, so each task's limit key is computed and stored
        # as the API does it. A key's tasks go in the same call, so they sit
        # within one call's rows of each other in claim order.
        items = [("bench.noop_keyed", {"k": k, "i": j}) for k in range(keys) for j in range(per_key)]
        for lo in range(0, len(items), 1000):
            cairnq.submit_many(items[lo : lo + 1000], queue=QUEUE)
        return {"tasks": len(items)}

    def fleet_claim(k: int, limit: int, live_claims: int) -> dict[str, Any]:
        """Time ``k`` keyed, fleet-limited claims of ``limit`` rows, the store call a worker's draw makes.

        Each claim's rows are completed (untimed) ``live_claims`` claims
        later, so every claim counts that many claims' calls still running
        in the fleet, as it would beside other busy workers.
        """
        from cairnq_django.store import get_store
        from cairnq_django.store.base import ClaimRequest
        from cairnq_django.tasks.registry import get_task
        from cairnq_django.worker.budgets import fleet_limits

        name = "bench.noop_keyed"
        definition = get_task(name)
        if definition is None:
            raise RuntimeError(f"{name} is not registered (BENCH_FLEET=1 not set?)")
        fleet = fleet_limits(definition, {})
        store = get_store()
        worker_id = "worker_bench_probe"
        # A worker's poll as its planner runs it (worker/planner.py): the probe
        # (expired leases from its floor; the once-per-lease-period full check
        # is left out), then the draw as one autocommit statement on a
        # connection that keeps its plans. A busy worker skips the probe.
        request = ClaimRequest(
            [QUEUE], worker_id, 30_000, [name], probe=False, recover=False, single_draw=True, reuse_plans=True
        )
        times, running = [], []
        for _ in range(k):
            start = _wire.now()
            probe = store.probe_claim([QUEUE], [name], leaseless=False)
            if not probe.any or probe.expired:
                raise RuntimeError(f"the keyed claim's probe found {probe}: nothing due, or a lease expired")
            rows = store.claim_session(request, lambda draw: draw([name], limit, fleet)) or []
            times.append(_wire.now() - start)
            if len(rows) != limit:
                raise RuntimeError(f"a keyed claim took {len(rows)} rows of {limit}: keys ran out")
            running.append(rows)
            if len(running) > live_claims:
                store.complete_many(worker_id, [(row.id, None) for row in running.pop(0)])
        return {"k": k, "limit": limit, "live_claims": live_claims, "times_ms": [t * 1000 for t in times]}

    _wire.serve(
        {
            "setup": setup,
            "enqueue_one": enqueue_one,
            "enqueue_bulk": enqueue_bulk,
            "submit": submit,
            "submit_delayed": submit_delayed,
            "claim_cost": claim_cost,
            "submit_keyed": submit_keyed,
            "fleet_claim": fleet_claim,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["client"])
    parser.add_argument("--dialect", required=True, choices=["postgres", "sqlite"])
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    client(args.dialect, args.db)


if __name__ == "__main__":
    main()
