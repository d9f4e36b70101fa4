"""The admin flags live tasks whose name no handler of this deployment serves.

Pins (fault plan F18 b): a queued or running task nobody here will ever claim
that looks like any other queued task; a flag on finished tasks or on
registered names; a "handler" filter that misses or over-matches; and a flag
that costs a query per row.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from cairnq_django.tasks.registry import get_task

from . import ROW_ID, make_task

CHANGELIST = "admin:cairnq_task_changelist"
FLAG = "cairnq-badge--no-handler"
REGISTERED = "demo.noop"


@pytest.fixture
def superuser_client(cairnq_db: Any) -> Client:
    from django.contrib.auth.models import User

    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


@pytest.fixture
def tasks(store: Any) -> dict[str, str]:
    assert get_task(REGISTERED) is not None, "the test project registers demo.noop"
    return {
        "ghost_queued": make_task(store, "queued", name="ghost.queued").id,
        "ghost_running": make_task(store, "running", name="ghost.running").id,
        "ghost_failed": make_task(store, "failed", name="ghost.failed").id,
        "known_queued": make_task(store, "queued", name=REGISTERED).id,
    }


def rows(html: str) -> list[tuple[str, str]]:
    """Return (task id, status cell html) per changelist row."""
    return re.findall(
        ROW_ID + r'.*?<td class="field-status_cell">(.*?)</td>',
        html,
        flags=re.S,
    )


def test_changelist_flags_live_tasks_without_a_handler(superuser_client: Client, tasks: dict[str, str]) -> None:
    html = superuser_client.get(reverse(CHANGELIST)).content.decode()
    flagged = {task_id for task_id, cell in rows(html) if FLAG in cell}
    assert flagged == {tasks["ghost_queued"], tasks["ghost_running"]}
    assert "no handler in this deployment" in html
    # The flag sits beside the status badge, which still shows the status.
    cell = dict(rows(html))[tasks["ghost_queued"]]
    assert "cairnq-badge--queued" in cell


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("none", {"ghost_queued", "ghost_running"}),
        ("registered", {"known_queued"}),
    ],
)
def test_handler_filter(superuser_client: Client, tasks: dict[str, str], value: str, expected: set[str]) -> None:
    response = superuser_client.get(reverse(CHANGELIST), {"handler": value})
    assert response.status_code == 200
    by_id = {task_id: label for label, task_id in tasks.items()}
    assert {by_id[task_id] for task_id, _ in rows(response.content.decode())} == expected


def test_filter_is_offered_in_the_sidebar(superuser_client: Client, tasks: dict[str, str]) -> None:
    html = superuser_client.get(reverse(CHANGELIST)).content.decode()
    sidebar = html[html.index('id="changelist-filter"') :]
    assert "By handler" in sidebar
    assert "?handler=none" in sidebar and "No handler in this deployment" in sidebar


def test_detail_page_explains_the_flag(superuser_client: Client, tasks: dict[str, str]) -> None:
    html = superuser_client.get(reverse("admin:cairnq_task_change", args=[tasks["ghost_queued"]])).content.decode()
    assert 'id="cairnq-no-handler"' in html
    assert "No handler named “ghost.queued” is registered in this deployment" in html
    assert FLAG in html
    for label in ("known_queued", "ghost_failed"):
        other = superuser_client.get(reverse("admin:cairnq_task_change", args=[tasks[label]])).content.decode()
        assert 'id="cairnq-no-handler"' not in other and FLAG not in other, label


def test_flag_costs_no_query_per_row(store: Any, superuser_client: Client, tasks: dict[str, str]) -> None:
    def queries_for_page() -> int:
        with CaptureQueriesContext(connections["default"]) as queries:
            assert superuser_client.get(reverse(CHANGELIST), {"handler": "none"}).status_code == 200
        return len(queries.captured_queries)

    before = queries_for_page()
    for i in range(5):
        make_task(store, "queued", name=f"ghost.more{i}")
    assert queries_for_page() == before
