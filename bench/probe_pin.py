"""What the PostgreSQL probe reads under a held snapshot, by where it starts (issue 21).

    .venv/bin/python bench/probe_pin.py [--n 30000] [--pg postgresql://root@127.0.0.1:5433/postgres]

Drops and recreates database ``bench_probe`` (``--db``), migrates it with
the repository's test project, then holds an idle ``REPEATABLE READ``
snapshot while ``--n`` tasks are submitted, claimed with a 1 ms lease and
completed, so each leaves its queued version in the claim index and its
running version in the lease index, where the snapshot keeps them. Five
fresh tasks are then submitted and left queued. The probe statement
(``claimable_probe.sql``) is timed from three starts: both halves from the
lowest (a worker's first probe, and the full probe once per lease period),
the queue from its cursor with the leases from the lowest, and both from
their floors (what a probe after a probe does). Prints the best of five
runs of each (milliseconds, client side, planning included) and the shared
buffers of one ``EXPLAIN (ANALYZE, BUFFERS)``; no result file.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg", default="postgresql://root@127.0.0.1:5433/postgres", help="DSN of any database on the server")
    parser.add_argument("--db", default="bench_probe", help="database to drop and recreate (must start with bench_)")
    parser.add_argument("--n", type=int, default=30_000, help="tasks claimed and settled under the held snapshot")
    args = parser.parse_args()
    if not args.db.startswith("bench_"):
        parser.error("--db must start with bench_")
    with psycopg.connect(args.pg, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{args.db}"')
    dsn = args.pg.rsplit("/", 1)[0] + "/" + args.db
    os.environ["DATABASE_URL"] = dsn.replace("postgresql://", "postgres://", 1)
    os.environ["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    subprocess.run([sys.executable, str(REPO / "manage.py"), "migrate", "-v", "0"], check=True, cwd=REPO)
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.db import connection

    from cairnq_django.store import SubmitSpec, get_store
    from cairnq_django.store.postgres.claim_cursor import HEAD_RUN_AT_MS, Start, statement_params
    from cairnq_django.store.sql_files import load

    store = get_store()
    pin = psycopg.connect(dsn)
    pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    pin.execute("SELECT 1")
    for _ in range(0, args.n, 5_000):
        store.submit_many([SubmitSpec(name="job", payload_json="{}", queue="bench") for _ in range(5_000)])
    left = args.n
    while left > 0:
        rows = store.claim(["bench"], "w1", limit=500, lease_ms=1)
        store.complete_many("w1", [(row.id, None) for row in rows])
        left -= len(rows)
    store.submit_many([SubmitSpec(name="job", payload_json="{}", queue="bench") for _ in range(5)])
    time.sleep(1.5)  # every lease above has run out more than the expiry margin ago
    with connection.cursor() as cursor:
        cursor.execute("SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint")
        now_ms = cursor.fetchone()[0]

    sql = load("postgres", "claimable_probe")
    base = {"queues": ["bench"], "names": None, "leaseless": False}
    head = statement_params([Start.head("bench")])
    cursor_floor = statement_params([Start("bench", 0, now_ms - 100, "")])
    starts = [
        ("queue and leases from the lowest", {**base, **head, "expired_from_ms": HEAD_RUN_AT_MS}),
        ("queue from its cursor, leases from the lowest", {**base, **cursor_floor, "expired_from_ms": HEAD_RUN_AT_MS}),
        ("queue and leases from their floors", {**base, **cursor_floor, "expired_from_ms": now_ms - 1_000}),
    ]
    print(f"{args.n} tasks claimed and settled under a held snapshot; probe of queue 'bench':")
    for label, params in starts:
        with connection.cursor() as cursor:
            best = float("inf")
            for _ in range(5):
                began = time.perf_counter()
                cursor.execute(sql, params)
                cursor.fetchall()
                best = min(best, time.perf_counter() - began)
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
            root = cursor.fetchone()[0][0]["Plan"]
        buffers = root.get("Shared Hit Blocks", 0) + root.get("Shared Read Blocks", 0)
        print(f"  {label}: {best * 1000:.2f} ms, {buffers} buffers")
    pin.close()


if __name__ == "__main__":
    main()
