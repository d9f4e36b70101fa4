"""Time the admin's pages on a million rows, PostgreSQL or SQLite (issues 4 and 20).

Usage (from the repository root; the database is created if missing and its
cairnq tables are emptied and refilled):

    DATABASE_URL=postgres://root@127.0.0.1:5432/h_admin_bench \\
        .venv/bin/python bench/admin_scale.py [--rows 1000000] [--repeat 20]
    DATABASE_URL=sqlite:////tmp/admin-bench.sqlite3 .venv/bin/python bench/admin_scale.py

Rows are generated inside the database with one ``INSERT ... SELECT`` (a
realistic mix: 90 % succeeded, 4 % failed, 1 % canceled, 4 % queued, 1 %
running over 8 queues and 40 names, a key on every tenth task), with 100
registered workers (80 live, 20 stopped) and the last hour of per-minute
history for every queue. Each page is then fetched through Django's test
client as a logged-in superuser. Prints the median, p95 and worst wall time
per page and the statements each page issued (issue 20 wants p95 < 300 ms).
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

FILL = """
INSERT INTO cairnq_tasks (
    id, name, queue, status, payload, result, error, metadata, progress, message, attempt,
    max_attempts, priority, worker_id, lease_until_ms, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
)
SELECT
    'task_' || lpad(created::text, 14, '0') || lpad(i::text, 12, '0'),
    'bench.job' || (i %% 40),
    'q' || (i %% 8),
    status,
    jsonb_build_object('n', i, 'to', 'user' || i || '@example.com'),
    CASE WHEN status = 'succeeded' THEN '{"ok": true}'::jsonb END,
    CASE WHEN status = 'failed' THEN
        '{"type": "ValueError", "code": "handler_error", "message": "boom", "retryable": true, "details": {}}'::jsonb
    END,
    '{}'::jsonb,
    CASE WHEN status IN ('succeeded', 'running') THEN 0.5 END,
    CASE WHEN status = 'running' THEN 'half way' END,
    CASE WHEN status = 'queued' THEN 0 ELSE 1 END,
    3,
    0,
    CASE WHEN status <> 'queued' THEN 'worker_bench' END,
    CASE WHEN status = 'running' THEN %(now)s + 30000 END,
    created,
    NULL,
    NULL,
    'task_' || lpad(created::text, 14, '0') || lpad(i::text, 12, '0'),
    CASE WHEN i %% 50 = 0 THEN 'corr-' || (i / 50) END,
    created,
    created,
    CASE WHEN status IN ('succeeded', 'failed', 'canceled') THEN created + 1000 END
FROM (
    SELECT
        i,
        -- Spread creation over the last 30 days, oldest first.
        %(now)s - (%(rows)s - i) * (2592000000 / %(rows)s) AS created,
        CASE
            WHEN i > %(rows)s - %(rows)s / 20 THEN (CASE WHEN i %% 5 = 0 THEN 'running' ELSE 'queued' END)
            WHEN i %% 100 < 4 THEN 'failed'
            WHEN i %% 100 = 4 THEN 'canceled'
            ELSE 'succeeded'
        END AS status
    FROM generate_series(1, %(rows)s) AS i
) AS g
"""

# The same mix for SQLite, numbered by a recursive CTE (no generate_series).
SQLITE_FILL = """
INSERT INTO cairnq_tasks (
    id, name, queue, status, payload, result, error, metadata, progress, message, attempt,
    max_attempts, priority, worker_id, lease_until_ms, run_at_ms, cancel_requested_at_ms,
    parent_id, root_id, correlation_id, created_at_ms, updated_at_ms, completed_at_ms
)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %(rows)s),
g AS (
    SELECT
        i,
        %(now)s - (%(rows)s - i) * (2592000000 / %(rows)s) AS created,
        CASE
            WHEN i > %(rows)s - %(rows)s / 20 THEN (CASE WHEN i %% 5 = 0 THEN 'running' ELSE 'queued' END)
            WHEN i %% 100 < 4 THEN 'failed'
            WHEN i %% 100 = 4 THEN 'canceled'
            ELSE 'succeeded'
        END AS status
    FROM n
)
SELECT
    'task_' || substr('00000000000000' || created, -14) || substr('000000000000' || i, -12),
    'bench.job' || (i %% 40),
    'q' || (i %% 8),
    status,
    json_object('n', i, 'to', 'user' || i || '@example.com'),
    CASE WHEN status = 'succeeded' THEN '{"ok": true}' END,
    CASE WHEN status = 'failed' THEN
        '{"type": "ValueError", "code": "handler_error", "message": "boom", "retryable": true, "details": {}}'
    END,
    '{}',
    CASE WHEN status IN ('succeeded', 'running') THEN 0.5 END,
    CASE WHEN status = 'running' THEN 'half way' END,
    CASE WHEN status = 'queued' THEN 0 ELSE 1 END,
    3,
    0,
    CASE WHEN status <> 'queued' THEN 'worker_bench' END,
    CASE WHEN status = 'running' THEN %(now)s + 30000 END,
    created,
    NULL,
    NULL,
    'task_' || substr('00000000000000' || created, -14) || substr('000000000000' || i, -12),
    CASE WHEN i %% 50 = 0 THEN 'corr-' || (i / 50) END,
    created,
    created,
    CASE WHEN status IN ('succeeded', 'failed', 'canceled') THEN created + 1000 END
FROM g
"""

SQLITE_KEYS = """
INSERT INTO cairnq_task_keys (key, task_id, created_at_ms, updated_at_ms)
SELECT 'order-' || substr(id, 20), id, created_at_ms, created_at_ms
FROM cairnq_tasks WHERE CAST(substr(id, 20) AS INTEGER) %% 10 = 0
"""

SQLITE_BULK = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %(count)s)
INSERT INTO cairnq_tasks (id, name, queue, status, payload, metadata, run_at_ms, created_at_ms, updated_at_ms)
SELECT 'task_' || substr('00000000000000' || %(now)s, -14) || 'B' || substr('00000000000' || i, -11),
       'bench.bulk', 'bulk', 'queued', '{}', '{}', %(now)s, %(now)s, %(now)s
FROM n
"""

KEYS = """
INSERT INTO cairnq_task_keys (key, task_id, created_at_ms, updated_at_ms)
SELECT 'order-' || substr(id, 20), id, created_at_ms, created_at_ms
FROM cairnq_tasks WHERE substr(id, 20)::bigint %% 10 = 0
"""

BULK = """
INSERT INTO cairnq_tasks (id, name, queue, status, payload, metadata, run_at_ms, created_at_ms, updated_at_ms)
SELECT 'task_' || lpad(%(now)s::text, 14, '0') || 'B' || lpad(i::text, 11, '0'),
       'bench.bulk', 'bulk', 'queued', '{}'::jsonb, '{}'::jsonb, %(now)s, %(now)s, %(now)s
FROM generate_series(1, %(count)s) AS i
"""


def ensure_database(url: str) -> None:
    """Create the benchmark database if it does not exist."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin_url = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))


def load(rows: int) -> None:
    from django.db import connection

    postgres = connection.vendor == "postgresql"
    started = time.perf_counter()
    with connection.cursor() as cursor:
        if postgres:
            cursor.execute("TRUNCATE cairnq_task_keys, cairnq_tasks")
            cursor.execute("SELECT (extract(epoch from now()) * 1000)::bigint")
        else:
            cursor.execute("DELETE FROM cairnq_task_keys")
            cursor.execute("DELETE FROM cairnq_tasks")
            cursor.execute("SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)")
        now_ms = cursor.fetchone()[0]
        cursor.execute(FILL if postgres else SQLITE_FILL, {"rows": rows, "now": now_ms})
        cursor.execute(KEYS if postgres else SQLITE_KEYS, {})
        cursor.execute(BULK if postgres else SQLITE_BULK, {"count": 10_000, "now": now_ms})
        cursor.execute("SELECT count(*) FROM cairnq_tasks")
        total = cursor.fetchone()[0]
    load_fleet(now_ms)
    with connection.cursor() as cursor:
        if postgres:
            cursor.execute("VACUUM ANALYZE cairnq_tasks")
            cursor.execute("ANALYZE cairnq_task_keys")
        else:
            cursor.execute("ANALYZE")
    print(f"loaded {total} tasks in {time.perf_counter() - started:.1f} s")


def load_fleet(now_ms: int) -> None:
    """100 registered workers (80 live, 20 stopped) and the last hour of history per queue."""
    from cairnq_django.models import QueueMinute, Worker

    Worker.objects.all().delete()
    QueueMinute.objects.all().delete()
    Worker.objects.bulk_create(
        Worker(
            id=f"worker_bench{i:03d}", host=f"host-{i % 10}", pid=1000 + i, queues=[f"q{i % 8}", f"q{(i + 1) % 8}"],
            names=[], concurrency=8, heartbeat_interval_ms=10_000, started_at_ms=now_ms - 3_600_000,
            last_seen_at_ms=now_ms - (i % 5) * 1000, stopped_at_ms=now_ms - 60_000 if i >= 80 else None,
            in_flight=i % 8, succeeded=1000 * i, failed=i, per_minute=60.0,
        )
        for i in range(100)
    )
    minute = now_ms - now_ms % 60_000
    QueueMinute.objects.bulk_create(
        QueueMinute(
            queue=f"q{q}", minute_ms=minute - m * 60_000, succeeded=500 + m, failed=m % 7, retried=m % 3,
            pickups=500 + m, pickup_ms_sum=(500 + m) * 20, pickup_le_10ms=200, pickup_le_50ms=250 + m,
            pickup_le_250ms=50,
        )
        for q in range(8)
        for m in range(60)
    )


# A page to time: (label, path, query parameters or None).
Page = tuple[str, str, dict[str, str] | None]
TASKS = "/admin/cairnq/task/"


def list_pages() -> list[Page]:
    """The task list, unfiltered and under the filters the admin offers (the rows ``load`` makes)."""
    return [
        ("changelist, unfiltered", TASKS, None),
        ("changelist, page 100", TASKS, {"p": "99"}),
        ("status=failed", TASKS, {"status": "failed"}),
        ("status=queued & queue=q3", TASKS, {"status": "queued", "queue": "q3"}),
        ("status=cancel_requested (none)", TASKS, {"status": "cancel_requested"}),
        ("queue=q5", TASKS, {"queue": "q5"}),
        ("name=bench.job7", TASKS, {"name": "bench.job7"}),
        ("queue=nope (empty)", TASKS, {"queue": "nope"}),
    ]


def search_pages(some_id: str, some_key: str) -> list[Page]:
    """The searches and a detail page, for a task id and a business key that exist."""
    return [
        ("search: task id", TASKS, {"q": some_id}),
        ("search: key", TASKS, {"q": some_key}),
        ("search: correlation id", TASKS, {"q": "corr-100"}),
        ("detail page", f"{TASKS}{some_id}/change/", None),
    ]


def fleet_pages() -> list[Page]:
    """The dashboard, its live fragment, the workers pages and the Prometheus view."""
    return [
        ("dashboard", f"{TASKS}dashboard/", None),
        ("dashboard, live fragment", f"{TASKS}dashboard/", {"fragment": "queues"}),
        ("workers list", "/admin/cairnq/worker/", None),
        ("worker page", "/admin/cairnq/worker/worker_bench007/change/", None),
        ("queue metrics (Prometheus)", "/metrics/queues", None),
    ]


def superuser_client() -> Any:
    """A test client logged in as superuser ``bench`` (created on first use)."""
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.filter(username="bench").first() or User.objects.create_superuser("bench", password="bench")
    client = Client()
    client.force_login(user)
    return client


def timed(
    client: object, url: str, repeat: int, data: dict[str, str] | None = None
) -> tuple[float, float, float, float, int, int]:
    """GET a page ``repeat`` times after one warm-up.

    Return (median ms, p95 ms, max ms, median ms spent in SQL, statements, HTTP status).
    """
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url, data or {})  # type: ignore[attr-defined]
    times, sql_times = [], []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(url, data or {})  # type: ignore[attr-defined]
            times.append((time.perf_counter() - started) * 1000)
        sql_times.append(sum(float(q["time"]) for q in queries.captured_queries) * 1000)
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return (
        statistics.median(times),
        p95,
        max(times),
        statistics.median(sql_times),
        len(queries.captured_queries),
        response.status_code,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--skip-load", action="store_true", help="Reuse the rows already loaded.")
    args = parser.parse_args()

    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        ensure_database(url)
    elif not url.startswith("sqlite:"):
        sys.exit(
            "set DATABASE_URL to a scratch database, e.g. postgres://root@127.0.0.1:5432/h_admin_bench"
            " or sqlite:////tmp/admin-bench.sqlite3"
        )

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    call_command("migrate", verbosity=0)
    if not args.skip_load:
        load(args.rows)
    client = superuser_client()

    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM cairnq_tasks WHERE status = 'failed' ORDER BY id LIMIT 1 OFFSET 1000")
        some_id = cursor.fetchone()[0]
        cursor.execute("SELECT key FROM cairnq_task_keys ORDER BY key LIMIT 1 OFFSET 5000")
        some_key = cursor.fetchone()[0]

    pages = list_pages() + search_pages(some_id, some_key) + fleet_pages()
    print(f"\n{connection.vendor}, {args.repeat} requests a page after one warm-up")
    print(f"{'page':34} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} {'sql ms':>7} {'stmts':>6} {'http':>5}")
    for label, path, data in pages:
        median, p95, worst, sql_ms, statements, status = timed(client, path, args.repeat, data)
        print(f"{label:34} {median:10.1f} {p95:8.1f} {worst:8.1f} {sql_ms:7.1f} {statements:6d} {status:5d}")

    # Cancel 10,000 queued tasks with "select all" across a filtered changelist.
    client.get(TASKS, {"queue": "bulk"})
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = client.post(
            f"{TASKS}?queue=bulk",
            {"action": "cancel_tasks", "_selected_action": ["x"], "select_across": "1", "index": "0"},
        )
        elapsed = (time.perf_counter() - started) * 1000
    sql_ms = sum(float(q["time"]) for q in queries.captured_queries) * 1000
    print(
        f"{'cancel 10,000 (select across)':34} {elapsed:10.1f} {'':8} {sql_ms:7.1f}"
        f" {len(queries.captured_queries):6d} {response.status_code:5d}"
    )


if __name__ == "__main__":
    main()
