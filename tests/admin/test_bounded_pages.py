"""Pin that the dashboard and the task list stay bounded on a big table.

The dashboard's finished counts stop at a cap and say so ("1,000+"), and its
queue list comes from the claim index's walk. The task list's page query
always carries a LIMIT, and on SQLite a filter that matches few rows is read
through its own index rather than by walking the primary key past every row.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from cairnq_django.admin import dashboard
from cairnq_django.models import Task

from . import make_task

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "admin:cairnq_task_changelist"


@pytest.fixture
def superuser_client(cairnq_db: Any) -> Client:
    from django.contrib.auth.models import User

    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def test_finished_counts_stop_at_the_cap_and_say_so(
    store: Any, superuser_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboard, "TERMINAL_COUNT_CAP", 2)
    for _ in range(3):
        make_task(store, "succeeded", queue="emails")
    make_task(store, "failed", queue="emails")
    make_task(store, "queued", queue="emails")
    response = superuser_client.get(reverse("admin:cairnq_task_dashboard"))
    (row,) = response.context["rows"]
    shown = {status: text for status, _label, text in row.status_counts}
    assert shown == {"queued": "1", "running": "0", "succeeded": "2+", "failed": "1", "canceled": "0"}
    # The capped tile says so on hover (the hour's line under the chart is not capped).
    assert (
        '<span class="cairnq-count-value" title="Counting stops here: cairnq_stats counts every row.">2+</span>'
        in response.content.decode()
    )


def _page_query(client: Client, params: dict[str, str]) -> str:
    with CaptureQueriesContext(connections["default"]) as queries:
        assert client.get(reverse(CHANGELIST), params).status_code == 200
    (page,) = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('SELECT "cairnq_tasks"."id"')]
    return page


@pytest.mark.parametrize("params", [{"queue": "nowhere"}, {"queue": "emails"}, {"status": "cancel_requested"}])
def test_a_one_page_result_is_still_fetched_with_a_limit(
    store: Any, superuser_client: Client, dialect: str, params: dict[str, str]
) -> None:
    make_task(store, "queued", queue="emails")
    for _ in range(3):
        make_task(store, "succeeded", queue="other")
    page = _page_query(superuser_client, params)
    assert " LIMIT 50" in page, page
    if dialect != "sqlite":
        return
    with connections["default"].cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + page)
        plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
    # Read by the filter's index, then sorted: never a walk of the whole key.
    assert "SEARCH cairnq_tasks USING" in plan and "SCAN cairnq_tasks" not in plan, plan


def test_the_page_keeps_its_order_and_pages(store: Any, superuser_client: Client) -> None:
    made = [make_task(store, "queued", queue="emails").id for _ in range(60)]
    make_task(store, "queued", queue="other")
    first = superuser_client.get(reverse(CHANGELIST), {"queue": "emails"}).context["cl"]
    assert [task.id for task in first.result_list] == sorted(made, reverse=True)[:50]
    second = superuser_client.get(reverse(CHANGELIST), {"queue": "emails", "p": "2"}).context["cl"]
    assert [task.id for task in second.result_list] == sorted(made, reverse=True)[50:]
    oldest_first = superuser_client.get(reverse(CHANGELIST), {"queue": "emails", "o": "1"}).context["cl"]
    assert [task.id for task in oldest_first.result_list] == sorted(made)[:50]
    assert Task.objects.count() == 61
