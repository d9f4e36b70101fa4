"""The statements of one drain, from ``pg_stat_statements``, for a drain another command runs.

    .venv/bin/python bench/drain_statements.py --pg postgresql://root@127.0.0.1:5433/postgres &
    .venv/bin/python bench/fleet_scale.py processes --quick --n 100000 --processes 16 --claim-ahead 15 --pg ...

Waits until the bench queue holds work, resets the statistics, waits until
the queue is drained and prints each statement's calls, mean time and blocks
per call over the drain alone. Its own polls (every 50 ms) are among them.
Needs ``pg_stat_statements`` in the server's ``shared_preload_libraries``;
the script creates the extension in the drain's database.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _fleet
import _tables
import _wire  # bench/peers, put on the path by _tables

POLL_S = 0.05


def live(dsn: str, queue: str) -> bool:
    """Whether ``queue`` holds queued or running tasks; False while the database does not exist yet."""
    try:
        with _fleet.connect(dsn) as conn:
            row = conn.execute(_wire.sql("postgres", "live_exists"), {"queue": queue}).fetchone()
            return bool(row and row[0])
    except psycopg.Error:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg", required=True, help="a DSN of the bench server (any database)")
    parser.add_argument("--db", default="bench_scale", help="the database the drain runs in")
    parser.add_argument("--queue", default="bench")
    args = parser.parse_args()
    dsn = _tables.pg_dsn(args.pg, args.db)
    while not live(dsn, args.queue):
        time.sleep(POLL_S)
    with _fleet.connect(dsn) as stats:
        stats.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        stats.execute("SELECT pg_stat_statements_reset()")
        began = time.monotonic()
        while live(dsn, args.queue):
            time.sleep(POLL_S)
        print(f"drain: {time.monotonic() - began:.1f} s")
        for row in _fleet.top_statements(stats, limit=14):
            calls = max(1, int(row["calls"]))
            print(
                f"{row['calls']:>7} calls {row['rows']:>8} rows {row['mean_ms']:8.2f} ms "
                f"{row['blocks'] / calls:7.0f} blocks/call  {' '.join(str(row['query']).split())[:70]}"
            )


if __name__ == "__main__":
    main()
