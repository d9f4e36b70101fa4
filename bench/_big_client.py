"""The Django-side processes of ``big_table.py``: a timed claim loop, the retention purge, the admin pages.

    python bench/_big_client.py claim --k K --warmup W   # K store claims of one row, each settled at once
    python bench/_big_client.py purge --older-than-ms MS # the retention sweep, every batch timed
    python bench/_big_client.py admin --repeat R         # the admin pages, R fetches each

``claim`` and ``purge`` run on the bench project (``ours_project.settings``,
database from ``BENCH_DB``); ``admin`` on the test project, as
``admin_scale.py`` does (database from ``DATABASE_URL``). Each prints one
JSON line on stdout as its last line (``{"fatal": ...}`` if it failed);
``purge`` first prints ``ready`` once Django is up and waits for a line on
stdin, so the harness can start its drains at the purge's first batch.
Timestamps are ``CLOCK_MONOTONIC`` seconds (``_wire.now``), shared with the
harness. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any

import _wire

# The queue and name of big_table.py's due tasks (bench/sql/postgres/big_fill_due.sql).
DUE_QUEUE = "due"
DUE_NAME = "bench.noop"
# The admin pages issue 21 asks about, by admin_scale.py's labels; the fill
# names its queues and names so that these filters match rows.
ADMIN_PAGES = (
    "changelist, unfiltered",
    "status=failed",
    "queue=q5",
    "name=bench.job7",
    "dashboard",
    "dashboard, live fragment",
)


def claim(k: int, warmup: int) -> dict[str, Any]:
    """Time ``k`` single-row claims through the store, as a worker's claim makes them.

    ``store.claim`` is the probe and the draw of a worker's claim session.
    Each claimed row is completed at once (untimed), so the table keeps its
    shape: one row fewer due, one more finished. The first ``warmup`` claims
    are not timed (connection, plans, the index pages the claim walks).
    """
    from cairnq_django.store import get_store

    store = get_store()
    worker_id = "worker_bench_big_claim"
    times_ms: list[float] = []
    for i in range(warmup + k):
        started = time.perf_counter()
        rows = store.claim([DUE_QUEUE], worker_id, limit=1, names=[DUE_NAME])
        elapsed_ms = (time.perf_counter() - started) * 1000
        if not rows:
            raise RuntimeError(f"claim {i} found nothing due: too few due tasks for the claims asked")
        store.complete(rows[0].id, worker_id, None)
        if i >= warmup:
            times_ms.append(elapsed_ms)
    return {"k": k, "warmup": warmup, "times_ms": times_ms}


class TimedPurges:
    """The store, with each ``purge_batch`` call (a sweep's batch) timed: one statement, its own transaction.

    The batch's row locks are taken by its ``FOR UPDATE SKIP LOCKED`` and held
    until that statement commits, so a batch's duration bounds how long it
    holds them (from this side of the connection: the round trip is included).
    """

    def __init__(self, store: Any) -> None:
        self._store = store
        self.batches: list[tuple[float, float, int]] = []  # (start, ms, rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def purge_batch(self, rule: Any, *, limit: int, from_ms: int | None) -> Any:
        started = _wire.now()
        batch = self._store.purge_batch(rule, limit=limit, from_ms=from_ms)
        self.batches.append((started, (_wire.now() - started) * 1000, len(batch.ids)))
        return batch


def purge(older_than_ms: int) -> dict[str, Any]:
    """Run the retention sweep a worker's housekeeping runs, with ``RETENTION = older_than_ms``.

    ``parse_rules`` turns the value into rules as the setting would be, and
    ``sweep`` purges them in its default batches (``DEFAULT_BATCH``), the call
    and size ``worker/housekeeping.py`` uses; only the store is wrapped.
    """
    from cairnq_django.client import retention
    from cairnq_django.store import get_store

    store = TimedPurges(get_store())
    rules = retention.parse_rules(older_than_ms)
    store.now_ms()  # open the connection before the harness's clock starts
    print("ready", flush=True)
    sys.stdin.readline()
    started = _wire.now()
    purged = retention.sweep(store, rules=rules)  # type: ignore[arg-type]
    return {
        "purged": purged,
        "batch_limit": retention.DEFAULT_BATCH,
        "started": started,
        "ended": _wire.now(),
        "batches": store.batches,
    }


def admin(repeat: int) -> dict[str, Any]:
    """Fetch ``ADMIN_PAGES`` ``repeat`` times each with admin_scale.py's timing, as a superuser.

    The test project's own tables (sessions, users, ...) are migrated first;
    workers and an hour of per-minute history are loaded as admin_scale.py
    loads them, so the dashboard has a fleet to show beside the big table.
    """
    from django.core.management import call_command
    from django.db import connection

    import admin_scale

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT (extract(epoch from now()) * 1000)::bigint")
        now_ms = int(cursor.fetchone()[0])
    admin_scale.load_fleet(now_ms)
    client = admin_scale.superuser_client()
    pages = {label: (path, data) for label, path, data in admin_scale.list_pages() + admin_scale.fleet_pages()}
    out = []
    for label in ADMIN_PAGES:
        path, data = pages[label]
        median, p95, worst, sql_ms, statements, status = admin_scale.timed(client, path, repeat, data)
        out.append(
            {
                "page": label,
                "path": path,
                "query": data,
                "median_ms": median,
                "p95_ms": p95,
                "max_ms": worst,
                "sql_median_ms": sql_ms,
                "statements": statements,
                "http": status,
            }
        )
        print(f"{label}: p50 {median:.1f} ms, p95 {p95:.1f} ms", file=sys.stderr, flush=True)
    return {"repeat": repeat, "pages": out}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["claim", "purge", "admin"])
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--older-than-ms", type=int, default=3_600_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    os.environ["DJANGO_SETTINGS_MODULE"] = "testproject.settings" if args.role == "admin" else "ours_project.settings"
    try:
        import django

        django.setup()
        if args.role == "claim":
            out = claim(args.k, args.warmup)
        elif args.role == "purge":
            out = purge(args.older_than_ms)
        else:
            out = admin(args.repeat)
    except Exception:  # noqa: BLE001 - the harness reads the failure from stdout
        out = {"fatal": traceback.format_exc()[-2000:]}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
