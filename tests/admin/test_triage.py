"""Pin the dashboard's failure triage and the bulk-operation pages.

The triage reads only ``cairnq_django_error_minute`` (its plan EXPLAINed on
both dialects over a week of error minutes); each error links to the task
list filtered by queue, status and error, where "retry / cancel all matching"
confirm and create a ``BulkOperation`` for the workers to advance.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from cairnq_django.admin.throughput import hour_start
from cairnq_django.admin.triage import top_errors, triage_query
from cairnq_django.client.task_filter import matching_tasks
from cairnq_django.models import MINUTE_MS, BulkOperation, ErrorMinute, Task

from . import WORKER, make_task, staff_user

DASHBOARD = "admin:cairnq_task_dashboard"
CHANGELIST = "admin:cairnq_task_changelist"
BULK = "admin:cairnq_task_bulk"


@pytest.fixture
def root(cairnq_db: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def fail_with(store: Any, queue: str, error: dict[str, Any], name: str | None = None) -> Task:
    """A failed task whose stored error is ``error``."""
    task = make_task(store, "running", queue=queue, name=name)
    store.fail(task.id, WORKER, error, retryable=False)
    return store.get(task.id)


def minute(store: Any, back: int = 0) -> int:
    now = store.now_ms()
    return now - now % MINUTE_MS - back * MINUTE_MS


def test_top_errors_sum_minutes_and_names(store: Any) -> None:
    now = store.now_ms()
    m = minute(store)
    rows = [
        ("emails", m, "send", "SMTPError", "connection refused", 3, 10),
        ("emails", m - MINUTE_MS, "send", "SMTPError", "connection refused", 2, 0),
        ("emails", m, "digest", "SMTPError", "connection refused", 1, 0),
        ("emails", m, "send", "KeyError", "'to'", 4, 0),
        ("emails", m - 61 * MINUTE_MS, "send", "Old", "older than the hour", 99, 0),
        ("other", m, "x", "ValueError", "bad", 1, 0),
    ]
    for queue, minute_ms, name, kind, message, failed, retried in rows:
        ErrorMinute.objects.create(
            queue=queue, minute_ms=minute_ms, name=name, error_type=kind, message=message, failed=failed, retried=retried
        )
    errors = top_errors(["emails"], now, "default")["emails"]
    assert [(e.error_type, e.failed, e.retried) for e in errors] == [("SMTPError", 6, 10), ("KeyError", 4, 0)]
    assert errors[0].shown_names == ["send", "digest"]
    assert errors[0].filter() == {
        "queue": "emails", "error_type": "SMTPError", "error_message": "connection refused", "status": "failed"
    }


def test_the_dashboard_lists_top_errors_from_error_minutes_alone(store: Any, root: Client) -> None:
    make_task(store, "failed", queue="emails")
    ErrorMinute.objects.create(
        queue="emails", minute_ms=minute(store), name="mail.send", error_type="SMTPError",
        message="421 try again later", failed=7, retried=30,
    )
    with CaptureQueriesContext(connections["default"]) as queries:
        html = root.get(reverse(DASHBOARD)).content.decode()
    triage = [query["sql"] for query in queries if "cairnq_django_error_minute" in query["sql"]]
    assert len(triage) == 1 and "cairnq_tasks" not in triage[0]
    card = html.split('class="cairnq-queue"', 1)[1]
    assert "Top errors, last hour" in card
    assert "SMTPError" in card and "421 try again later" in card
    assert "7 failed" in card and "30 retried" in card and "<code>mail.send</code>" in card
    query = urlencode(
        {"queue": "emails", "error_type": "SMTPError", "error_message": "421 try again later", "status": "failed"}
    )
    escaped = query.replace("&", "&amp;")
    assert f'href="{reverse(CHANGELIST)}?{escaped}"' in card
    assert f'href="{reverse(BULK)}?{escaped}&amp;action=retry"' in card


def test_a_user_without_retry_permission_sees_no_retry_link(store: Any) -> None:
    ErrorMinute.objects.create(
        queue="q", minute_ms=minute(store), name="n", error_type="E", message="m", failed=1
    )
    make_task(store, "failed", queue="q")
    client = Client()
    client.force_login(staff_user("viewer", "view_task"))
    html = client.get(reverse(DASHBOARD)).content.decode()
    assert "Top errors, last hour" in html and "Retry all failed" not in html


def _fill_week(dialect: str) -> None:
    """30 queues, a week of minutes, 3 errors each (907,200 rows), in one statement."""
    columns = "queue, minute_ms, name, error_type, message, failed, retried"
    with connections["default"].cursor() as cursor:
        if dialect == "postgres":
            cursor.execute(
                f"INSERT INTO cairnq_django_error_minute ({columns})"
                " SELECT 'q' || q, 1700000000000 - m * 60000, 'task', 'E' || e, 'message', 1, 0"
                " FROM generate_series(1, 30) AS q, generate_series(0, 10079) AS m, generate_series(1, 3) AS e"
            )
            cursor.execute("ANALYZE cairnq_django_error_minute")
        else:
            cursor.execute(
                "WITH RECURSIVE m(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM m WHERE n < 10079),"
                " q(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM q WHERE n < 30),"
                " e(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM e WHERE n < 3)"
                f" INSERT INTO cairnq_django_error_minute ({columns})"
                " SELECT 'q' || q.n, 1700000000000 - m.n * 60000, 'task', 'E' || e.n, 'message', 1, 0 FROM q, m, e"
            )
            cursor.execute("ANALYZE")


def test_the_triage_query_uses_the_unique_index(cairnq_db: Any, dialect: str) -> None:
    _fill_week(dialect)
    queryset = triage_query(["q1", "q7", "q30"], hour_start(1_700_000_000_000), "default")
    sql, params = queryset.query.sql_with_params()
    with connections["default"].cursor() as cursor:
        cursor.execute(("EXPLAIN " if dialect == "postgres" else "EXPLAIN QUERY PLAN ") + sql, params)
        plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
    assert "cairnq_tasks" not in plan
    if dialect == "postgres":
        assert "cairnq_django_error_minute_uniq" in plan, plan
        assert "Seq Scan" not in plan, plan
    else:
        used = re.search(r"SEARCH cairnq_django_error_minute USING INDEX (\S+) \(queue=\? AND minute_ms>\?\)", plan)
        assert used is not None, plan
        with connections["default"].cursor() as cursor:
            cursor.execute("PRAGMA index_list(cairnq_django_error_minute)")
            unique = {row[1] for row in cursor.fetchall() if row[2]}
        assert used.group(1) in unique, (plan, unique)
    assert len(list(queryset)) == 3 * 3 * 60


def test_the_task_list_filters_by_error_type_and_message_prefix(store: Any, root: Client) -> None:
    smtp = fail_with(store, "emails", {"type": "SMTPError", "message": "421 try again later\nsecond line"})
    other = fail_with(store, "emails", {"type": "SMTPError", "message": "550 no such user"})
    upper = fail_with(store, "emails", {"type": "SMTPError", "message": "421 TRY AGAIN LATER"})
    keyerror = fail_with(store, "emails", {"type": "KeyError", "message": "421 try again later"})
    spec = {"queue": "emails", "status": "failed", "error_type": "SMTPError", "error_message": "421 try again later"}
    assert set(matching_tasks(spec, Task.objects.all()).values_list("pk", flat=True)) == {smtp.id}
    html = root.get(reverse(CHANGELIST), spec).content.decode()
    assert smtp.id in html
    for absent in (other, upper, keyerror):
        assert absent.id not in html
    # The list offers both bulk operations for exactly that filter.
    assert 'id="cairnq-retry-all"' in html and 'id="cairnq-cancel-all"' in html
    # A list narrowed by something an operation cannot carry (a search) offers neither.
    searched = root.get(reverse(CHANGELIST), {**spec, "q": smtp.id}).content.decode()
    assert 'id="cairnq-retry-all"' not in searched


def test_confirm_counts_then_creates_an_operation(store: Any, root: Client) -> None:
    for _ in range(3):
        fail_with(store, "q", {"type": "E", "message": "boom"})
    make_task(store, "queued", queue="q")
    spec = {"queue": "q", "error_type": "E"}
    page = root.get(reverse(BULK), {**spec, "action": "retry"})
    assert page.status_code == 200
    html = page.content.decode()
    assert "3 tasks match this filter now" in html and "3 tasks will change" in html
    assert "No worker is running right now" in html
    response = root.post(reverse(BULK), {**spec, "action": "retry"})
    operation = BulkOperation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:cairnq_task_bulk_progress", args=[operation.pk])
    assert (operation.action, operation.filter, operation.matched, operation.state) == ("retry", spec, 3, "pending")
    assert operation.requested_by == "root"
    progress = root.get(response["Location"]).content.decode()
    assert 'id="cairnq-bulk-no-worker"' in progress and "0</strong> / <span id=\"cairnq-bulk-total\">3" in progress
    fragment = root.get(response["Location"], {"fragment": "progress"})
    assert fragment["X-Cairnq-Fragment"] == "progress" and "<html" not in fragment.content.decode()
    # The dashboard lists the open operation, linking its page.
    dashboard = root.get(reverse(DASHBOARD)).content.decode()
    assert f'<a href="{response["Location"]}">' in dashboard and "Retry tasks #" in dashboard
    # Nothing changed yet: only a worker does the work.
    assert Task.objects.filter(queue="q", status="failed").count() == 3


def test_without_a_filter_nothing_starts(store: Any, root: Client) -> None:
    response = root.post(reverse(BULK), {"action": "cancel"})
    assert response.status_code == 302 and response["Location"] == reverse(CHANGELIST)
    assert not BulkOperation.objects.exists()


@pytest.mark.parametrize(("action", "lacking"), [("retry", "cancel_task"), ("cancel", "retry_task")])
def test_the_action_permission_is_required(store: Any, action: str, lacking: str) -> None:
    fail_with(store, "q", {"type": "E", "message": "boom"})
    client = Client()
    client.force_login(staff_user("partial", "view_task", lacking))
    query = {"queue": "q", "action": action}
    assert client.get(reverse(BULK), query).status_code == 403
    assert client.post(reverse(BULK), query).status_code == 403
    assert not BulkOperation.objects.exists()


def test_an_operation_can_be_stopped(store: Any, root: Client) -> None:
    root.post(reverse(BULK), {"queue": "q", "action": "cancel"})
    operation = BulkOperation.objects.get()
    viewer = Client()
    viewer.force_login(staff_user("viewer", "view_task"))
    url = reverse("admin:cairnq_task_bulk_cancel", args=[operation.pk])
    assert viewer.post(url).status_code == 403
    assert root.get(url).status_code == 405
    assert root.post(url).status_code == 302
    operation.refresh_from_db()
    assert operation.state == "canceled" and operation.finished_at_ms is not None
    page = root.get(reverse("admin:cairnq_task_bulk_progress", args=[operation.pk])).content.decode()
    assert "data-cairnq-final" in page and "Stop this operation" not in page
