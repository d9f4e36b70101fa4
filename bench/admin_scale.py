"""Time the task admin on PostgreSQL with a million rows (issue 4, "Scale").

Usage (from the repository root; the database is created if missing and its
cairnq tables are emptied and refilled):

    DATABASE_URL=postgres://root@127.0.0.1:5432/h_admin_bench \\
        .venv/bin/python bench/admin_scale.py [--rows 1000000] [--repeat 5]

Rows are generated inside PostgreSQL with ``INSERT ... SELECT generate_series``
(a realistic mix: 90 % succeeded, 4 % failed, 1 % canceled, 4 % queued, 1 %
running over 8 queues and 40 names, a key on every tenth task), then each page
is fetched through Django's test client as a logged-in superuser. Prints the
median and worst wall time per page and the statements each page issued.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
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

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE cairnq_task_keys, cairnq_tasks")
        cursor.execute("SELECT (extract(epoch from now()) * 1000)::bigint")
        now_ms = cursor.fetchone()[0]
        cursor.execute(FILL, {"rows": rows, "now": now_ms})
        cursor.execute(KEYS, {})
        cursor.execute(BULK, {"count": 10_000, "now": now_ms})
        cursor.execute("VACUUM ANALYZE cairnq_tasks")
        cursor.execute("ANALYZE cairnq_task_keys")
        cursor.execute("SELECT count(*) FROM cairnq_tasks")
        total = cursor.fetchone()[0]
    print(f"loaded {total} tasks in {time.perf_counter() - started:.1f} s")


def timed(
    client: object, url: str, repeat: int, data: dict[str, str] | None = None
) -> tuple[float, float, float, int, int]:
    """GET a page ``repeat`` times after one warm-up.

    Return (median ms, max ms, median ms spent in SQL, statements, HTTP status).
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
    return (
        statistics.median(times),
        max(times),
        statistics.median(sql_times),
        len(queries.captured_queries),
        response.status_code,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-load", action="store_true", help="Reuse the rows already loaded.")
    args = parser.parse_args()

    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.exit("set DATABASE_URL to a scratch PostgreSQL database, e.g. postgres://root@127.0.0.1:5432/h_admin_bench")
    ensure_database(url)

    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    call_command("migrate", verbosity=0)
    if not args.skip_load:
        load(args.rows)
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser("bench", password="bench")
    client = Client()
    client.force_login(user)

    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM cairnq_tasks WHERE status = 'failed' ORDER BY id LIMIT 1 OFFSET 1000")
        some_id = cursor.fetchone()[0]
        cursor.execute("SELECT key FROM cairnq_task_keys ORDER BY key LIMIT 1 OFFSET 5000")
        some_key = cursor.fetchone()[0]

    base = "/admin/cairnq/task/"
    pages = [
        ("changelist, unfiltered", base, None),
        ("changelist, page 100", base, {"p": "99"}),
        ("status=failed", base, {"status": "failed"}),
        ("status=queued & queue=q3", base, {"status": "queued", "queue": "q3"}),
        ("status=cancel_requested (none)", base, {"status": "cancel_requested"}),
        ("queue=q5", base, {"queue": "q5"}),
        ("name=bench.job7", base, {"name": "bench.job7"}),
        ("queue=nope (empty)", base, {"queue": "nope"}),
        ("search: task id", base, {"q": some_id}),
        ("search: key", base, {"q": some_key}),
        ("search: correlation id", base, {"q": "corr-100"}),
        ("detail page", f"{base}{some_id}/change/", None),
        ("dashboard", f"{base}dashboard/", None),
    ]
    print(f"\n{'page':34} {'median ms':>10} {'max ms':>8} {'sql ms':>7} {'stmts':>6} {'http':>5}")
    for label, path, data in pages:
        median, worst, sql_ms, statements, status = timed(client, path, args.repeat, data)
        print(f"{label:34} {median:10.1f} {worst:8.1f} {sql_ms:7.1f} {statements:6d} {status:5d}")

    # Cancel 10,000 queued tasks with "select all" across a filtered changelist.
    client.get(base, {"queue": "bulk"})
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = client.post(
            f"{base}?queue=bulk",
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
