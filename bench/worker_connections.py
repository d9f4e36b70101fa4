"""Count the server connections one ``cairnq_worker`` process holds, idle and draining (issue 21).

    .venv/bin/python bench/worker_connections.py                # direct to PostgreSQL
    .venv/bin/python bench/worker_connections.py --pooler       # through PgBouncer on 6432

Starts ``manage.py cairnq_worker --concurrency N`` (testproject) on database
``--db`` (dropped and made again), samples every 50 ms while it idles and
while it drains no-op and short-sleep tasks, and prints the most connections
seen at once per ``application_name``: from ``pg_stat_activity`` direct, and
from PgBouncer's ``SHOW CLIENTS`` (read-only) through the pooler, where the
LISTEN connection still goes direct.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

REPO = Path(__file__).resolve().parents[1]
PYTHON = str(REPO / ".venv" / "bin" / "python")
SAMPLE_S = 0.05


def _env(db: str, pooler: bool, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "CAIRNQ_TEST_OVERRIDES")}
    env["DATABASE_URL"] = f"postgres://root@127.0.0.1:{port if pooler else 5432}/{db}"
    env["CAIRNQ_LOG_LEVEL"] = "INFO"
    if pooler:
        env.update(CAIRNQ_TEST_POOLER="transaction", CAIRNQ_DIRECT_PORT="5432")
    else:
        env.pop("CAIRNQ_TEST_POOLER", None)
    return env


def _direct_counts(conn: psycopg.Connection[Any], db: str, worker_id: str) -> Counter[str]:
    rows = conn.execute(
        "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = %s AND application_name LIKE %s GROUP BY 1",
        [db, f"cairnq_worker:{worker_id}%"],
    ).fetchall()
    return Counter({f"server {name}": n for name, n in rows})


def _pooler_counts(admin: psycopg.Connection[Any], db: str, worker_id: str) -> Counter[str]:
    cursor = admin.execute("SHOW CLIENTS")
    columns = [column.name for column in cursor.description or ()]
    found: Counter[str] = Counter()
    for row in cursor.fetchall():
        client = dict(zip(columns, row))
        if client["database"] == db and str(client["application_name"]).startswith(f"cairnq_worker:{worker_id}"):
            found[f"pgbouncer client {client['application_name']}"] += 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pooler", action="store_true", help="through PgBouncer (transaction mode)")
    parser.add_argument("--port", type=int, default=6432, help="PgBouncer's port")
    parser.add_argument("--db", default="bench_worker_connections")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--noop", type=int, default=3000)
    parser.add_argument("--sleep", type=int, default=400, help="demo.sleep tasks of 20 ms")
    args = parser.parse_args()

    direct = psycopg.connect("postgresql://root@127.0.0.1:5432/postgres", autocommit=True)
    direct.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
    direct.execute(f'CREATE DATABASE "{args.db}"')
    direct.close()
    subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], cwd=REPO, env=_env(args.db, False, 0), check=True)

    log = Path(tempfile.mkstemp(prefix="worker-connections-", suffix=".log")[1])
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [PYTHON, "manage.py", "cairnq_worker", "--concurrency", str(args.concurrency)],
            cwd=REPO, env=_env(args.db, args.pooler, args.port), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        while "cairnq worker worker_" not in log.read_text():
            if worker.poll() is not None:
                sys.exit(log.read_text()[-3000:])
            time.sleep(0.05)
        banner = log.read_text()
        worker_id = banner.split("cairnq worker ", 1)[1].split()[0]
        stats = psycopg.connect(f"postgresql://root@127.0.0.1:5432/{args.db}", autocommit=True)
        admin = (
            psycopg.connect(f"postgresql://root@127.0.0.1:{args.port}/pgbouncer", autocommit=True, prepare_threshold=None)
            if args.pooler else None
        )

        def sample() -> Counter[str]:
            counts = _direct_counts(stats, args.db, worker_id)
            if admin is not None:
                counts.update(_pooler_counts(admin, args.db, worker_id))
            return counts

        def watch(until: Any) -> dict[str, int]:
            most: dict[str, int] = {}
            while not until():
                counts = sample()
                for key, n in counts.items():
                    most[key] = max(most.get(key, 0), n)
                time.sleep(SAMPLE_S)
            return most

        idle_end = time.monotonic() + 6  # beyond one history flush (5 s)
        idle = watch(lambda: time.monotonic() > idle_end)
        submit = (
            "import cairnq_django as cq;"
            f"cq.submit_many([('demo.noop', {{'n': i}}) for i in range({args.noop})]"
            f" + [('demo.sleep', {{'ms': 20}})] * {args.sleep})"
        )
        started = time.monotonic()
        subprocess.run([PYTHON, "manage.py", "shell", "-c", submit], cwd=REPO, env=_env(args.db, False, 0), check=True)
        wanted = args.noop + args.sleep

        def drained() -> bool:
            row = stats.execute("SELECT count(*) FROM cairnq_tasks WHERE status = 'succeeded'").fetchone()
            return bool(row and row[0] >= wanted)

        busy = watch(drained)
        took = time.monotonic() - started
        print(json.dumps({
            "mode": "pgbouncer" if args.pooler else "direct",
            "concurrency": args.concurrency,
            "banner_connections": [line.strip() for line in banner.splitlines() if "connections:" in line],
            "idle_max": idle,
            "busy_max": busy,
            "drain_s": round(took, 2),
        }, indent=2))
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
