"""Pin the dashboard's last hour: the throughput chart, pickup p50/p95, and the one history query.

The history comes from ``cairnq_django_queue_minute`` alone, through its
unique (queue, minute_ms) index on both dialects (the plan is EXPLAINed over a
week of minutes for 30 queues); the page carries the chart as inline SVG.
"""

from __future__ import annotations

import re
from typing import Any

import django
import pytest
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from cairnq_django.admin.throughput import HISTORY_MINUTES, QueueHour, history_query, hour_start, last_hour, quantile_text
from cairnq_django.models import MINUTE_MS, QueueMinute

from . import make_task

DASHBOARD = "admin:cairnq_task_dashboard"


@pytest.fixture
def superuser_client(cairnq_db: Any) -> Client:
    from django.contrib.auth.models import User

    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def test_quantiles_come_from_the_buckets() -> None:
    hour = QueueHour(0)
    assert quantile_text(hour, 0.5) == "—"
    hour.pickups = 100
    hour.buckets.update(pickup_le_10ms=60, pickup_le_250ms=35, pickup_slower=5)
    assert quantile_text(hour, 0.5) == "≤ 10 ms"
    assert quantile_text(hour, 0.95) == "≤ 250 ms"
    assert quantile_text(hour, 0.99) == "> 2 min"
    hour.buckets.update(pickup_le_10ms=0, pickup_le_250ms=0, pickup_le_5s=100, pickup_slower=0)
    assert quantile_text(hour, 0.5) == "≤ 5 s"


def test_last_hour_places_each_minute(cairnq_db: Any) -> None:
    now = 1_700_000_000_000
    start = hour_start(now)
    assert now - start < HISTORY_MINUTES * MINUTE_MS
    QueueMinute.objects.create(queue="q", minute_ms=start, succeeded=3, failed=1)
    QueueMinute.objects.create(queue="q", minute_ms=start + 59 * MINUTE_MS, succeeded=5, retried=2)
    QueueMinute.objects.create(queue="q", minute_ms=start - MINUTE_MS, succeeded=100)  # older than the hour
    QueueMinute.objects.create(queue="other", minute_ms=start, succeeded=7)
    hour = last_hour(["q"], now, "default")["q"]
    assert hour.succeeded[0] == 3 and hour.failed[0] == 1
    assert hour.succeeded[59] == 5
    assert (hour.total_succeeded, hour.total_failed, hour.retried) == (8, 1, 2)


def test_the_dashboard_draws_the_hour(store: Any, superuser_client: Client) -> None:
    make_task(store, "succeeded", queue="emails")
    now = store.now_ms()
    minute = now - now % MINUTE_MS
    QueueMinute.objects.create(
        queue="emails", minute_ms=minute, succeeded=12, failed=3, pickups=20, pickup_ms_sum=400,
        pickup_le_10ms=10, pickup_le_50ms=9, pickup_le_1s=1,
    )
    QueueMinute.objects.create(queue="emails", minute_ms=minute - 30 * MINUTE_MS, succeeded=4)
    with CaptureQueriesContext(connections["default"]) as queries:
        html = superuser_client.get(reverse(DASHBOARD)).content.decode()
    history = [query["sql"] for query in queries if "cairnq_django_queue_minute" in query["sql"]]
    assert len(history) == 1
    assert "cairnq_tasks" not in history[0]
    card = html.split('class="cairnq-queue"', 1)[1]
    assert "16 succeeded" in card and "3 failed" in card
    assert "15/min" in card  # the peak minute
    assert '<svg class="cairnq-chart"' in card
    assert len(re.findall(r'class="cairnq-chart-ok"', card)) == 2
    assert len(re.findall(r'class="cairnq-chart-failed"', card)) == 1
    assert "12 succeeded, 3 failed</title>" in card
    # p50: 10 of 20 within 10 ms; p95: 19 of 20 within 50 ms.
    assert "p50 <strong>≤ 10 ms</strong> · p95 <strong>≤ 50 ms</strong>" in card


def test_a_queue_without_history_draws_an_empty_chart(store: Any, superuser_client: Client) -> None:
    make_task(store, "queued", queue="quiet")
    html = superuser_client.get(reverse(DASHBOARD)).content.decode()
    card = html.split('class="cairnq-queue"', 1)[1]
    assert '<svg class="cairnq-chart"' in card and "cairnq-chart-ok" not in card.split("</svg>")[0]
    assert "p50 <strong>—</strong> · p95 <strong>—</strong>" in card
    assert "Nothing settled in the last hour" in card


def test_breadcrumbs_follow_the_django_version(store: Any, superuser_client: Client) -> None:
    html = superuser_client.get(reverse(DASHBOARD)).content.decode()
    if django.VERSION >= (6, 0):
        assert '<ol class="breadcrumbs">' in html and '<li aria-current="page">Queue dashboard</li>' in html
    else:
        assert '<div class="breadcrumbs">' in html


def _fill_week(dialect: str) -> None:
    """30 queues, a week of minutes each (302,400 rows), in one statement."""
    with connections["default"].cursor() as cursor:
        if dialect == "postgres":
            cursor.execute(
                "INSERT INTO cairnq_django_queue_minute (queue, minute_ms, succeeded, failed, retried, canceled,"
                " pickups, pickup_ms_sum, pickup_le_10ms, pickup_le_50ms, pickup_le_250ms, pickup_le_1s,"
                " pickup_le_5s, pickup_le_30s, pickup_le_2min, pickup_slower)"
                " SELECT 'q' || q, 1700000000000 - m * 60000, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0"
                " FROM generate_series(1, 30) AS q, generate_series(0, 10079) AS m"
            )
            cursor.execute("ANALYZE cairnq_django_queue_minute")
        else:
            cursor.execute(
                "WITH RECURSIVE m(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM m WHERE n < 10079),"
                " q(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM q WHERE n < 30)"
                " INSERT INTO cairnq_django_queue_minute (queue, minute_ms, succeeded, failed, retried, canceled,"
                " pickups, pickup_ms_sum, pickup_le_10ms, pickup_le_50ms, pickup_le_250ms, pickup_le_1s,"
                " pickup_le_5s, pickup_le_30s, pickup_le_2min, pickup_slower)"
                " SELECT 'q' || q.n, 1700000000000 - m.n * 60000, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0"
                " FROM q, m"
            )
            cursor.execute("ANALYZE")


def test_the_history_query_uses_the_unique_index(cairnq_db: Any, dialect: str) -> None:
    _fill_week(dialect)
    queryset = history_query(["q1", "q7", "q30"], hour_start(1_700_000_000_000), "default")
    sql, params = queryset.query.sql_with_params()
    with connections["default"].cursor() as cursor:
        if dialect == "postgres":
            cursor.execute("EXPLAIN " + sql, params)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
    assert "cairnq_tasks" not in plan
    if dialect == "postgres":
        assert "cairnq_django_minute_uniq" in plan, plan
        assert "Seq Scan" not in plan, plan
    else:
        # SQLite keeps the table's UNIQUE (queue, minute_ms) as its automatic index.
        used = re.search(r"SEARCH cairnq_django_queue_minute USING INDEX (\S+) \(queue=\? AND minute_ms>\?\)", plan)
        assert used is not None, plan
        with connections["default"].cursor() as cursor:
            cursor.execute("PRAGMA index_list(cairnq_django_queue_minute)")
            unique = {row[1] for row in cursor.fetchall() if row[2]}
        assert used.group(1) in unique, (plan, unique)
    assert len(list(queryset)) == 3 * HISTORY_MINUTES


def test_the_live_fragment_is_the_cards_alone(store: Any, superuser_client: Client, cairnq_db: Any) -> None:
    make_task(store, "queued", queue="emails")
    page = superuser_client.get(reverse(DASHBOARD)).content.decode()
    assert 'id="cairnq-live" data-cairnq-refresh-ms="5000" data-cairnq-fragment-url="?fragment=queues"' in page
    assert "cairnq/dashboard.js" in page and "<noscript>" in page
    response = superuser_client.get(reverse(DASHBOARD), {"fragment": "queues"})
    assert response["X-Cairnq-Fragment"] == "queues"
    assert "no-store" in response["Cache-Control"]  # the admin view is never_cache
    fragment = response.content.decode()
    assert 'class="cairnq-queue"' in fragment and "emails" in fragment
    assert "<html" not in fragment and "breadcrumbs" not in fragment
    # The fragment asks for what the page asks for.
    from django.contrib.auth.models import User

    nobody = Client()
    nobody.force_login(User.objects.create_user("staff", password="pw", is_staff=True))
    assert nobody.get(reverse(DASHBOARD), {"fragment": "queues"}).status_code == 403
