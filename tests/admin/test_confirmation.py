"""A bulk cancel or retry of more than one task asks first; one task acts at once.

Pins: a bulk action that changes rows on its first POST, a confirmation page
whose counts or fates are wrong (or that reads the whole table for "select
all"), a confirm form that loses the selection or the list's filters, a
"take me back" that acts, and a single task that is asked about.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin import site
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from cairnq_django.admin import confirmation
from cairnq_django.models import Task

from . import make_task, staff_user, status_of
from .test_actions import CHANGELIST, client_for, messages_of


@pytest.fixture
def root(cairnq_db: Any) -> Client:
    return client_for(User.objects.create_superuser("root", password="pw"))


def first_post(client: Client, action: str, ids: list[str], url: str = "", **extra: str) -> Any:
    data = {"action": action, "_selected_action": ids, "index": "0", **extra}
    return client.post(url or reverse(CHANGELIST), data)


def counts_table(html: str) -> list[tuple[str, str, str]]:
    table = html[html.index('id="cairnq-confirm-counts"') :]
    table = table[: table.index("</table>")]
    return [
        (status, count, fate.strip())
        for status, count, fate in re.findall(
            r'cairnq-badge--([a-z_]+)">[^<]*</span></td>\s*'
            r'<td class="cairnq-num">([^<]*)</td>\s*<td>([^<]*)</td>',
            table,
        )
    ]


def hidden_inputs(html: str) -> list[tuple[str, str]]:
    form = html[html.index('class="cairnq-confirm-form"') :]
    return re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', form)


def test_bulk_cancel_asks_first_then_acts_on_confirm(store: Any, root: Client) -> None:
    queued = [make_task(store).id for _ in range(2)]
    running = make_task(store, "running").id
    done = make_task(store, "succeeded").id
    ids = [*queued, running, done]

    response = first_post(root, "cancel_tasks", ids)

    assert response.status_code == 200
    html = response.content.decode()
    assert "You selected 4 tasks:" in html
    assert counts_table(html) == [
        ("queued", "2", "canceled"),
        ("running", "1", "cancel requested: its worker stops it"),
        ("succeeded", "1", "skipped: already finished"),
    ]
    assert "3 tasks will change." in html
    assert all(task_id in html for task_id in ids)
    assert [status_of(task_id)[0] for task_id in ids] == ["queued", "queued", "running", "succeeded"]
    assert status_of(running)[1] is None and LogEntry.objects.count() == 0
    inputs = hidden_inputs(html)
    assert sorted(value for name, value in inputs if name == "_selected_action") == sorted(ids)
    assert ("action", "cancel_tasks") in inputs and ("post", "yes") in inputs
    assert 'href="/admin/cairnq/task/"' in html  # "No, take me back" is a plain link to the list

    confirmed = root.post(reverse(CHANGELIST), dict(_form_data(inputs)), follow=True)
    assert messages_of(confirmed) == ["2 canceled, 1 cancel requested, 1 skipped: already finished"]
    assert [status_of(task_id)[0] for task_id in queued] == ["canceled", "canceled"]
    assert LogEntry.objects.count() == 3


def _form_data(inputs: list[tuple[str, str]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name, value in inputs:
        if name == "_selected_action":
            data.setdefault(name, []).append(value)
        else:
            data[name] = value
    return data


@pytest.mark.parametrize(
    ("action", "fate"),
    [("retry_tasks", "re-queued, attempts kept"), ("retry_tasks_reset_attempts", "re-queued, attempts reset to 0")],
)
def test_bulk_retry_asks_first(store: Any, root: Client, action: str, fate: str) -> None:
    failed, canceled, queued = make_task(store, "failed").id, make_task(store, "canceled").id, make_task(store).id
    html = first_post(root, action, [failed, canceled, queued]).content.decode()
    assert counts_table(html) == [
        ("queued", "1", "skipped: not failed or canceled"),
        ("failed", "1", fate),
        ("canceled", "1", fate),
    ]
    assert "2 tasks will change." in html
    assert status_of(failed)[0] == "failed" and status_of(canceled)[0] == "canceled"


def test_one_task_acts_at_once(store: Any, root: Client) -> None:
    failed = make_task(store, "failed").id
    response = root.post(
        reverse(CHANGELIST), {"action": "retry_tasks", "_selected_action": [failed], "index": "0"}, follow=True
    )
    assert messages_of(response) == ["1 re-queued"]
    assert status_of(failed)[0] == "queued"


def test_select_across_keeps_the_filter_and_bounds_its_count(
    store: Any, root: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(confirmation, "COUNT_LIMIT", 3)
    monkeypatch.setattr(confirmation, "LISTED", 2)
    bulk = [make_task(store, queue="bulk").id for _ in range(5)]
    other = make_task(store, queue="other").id
    url = reverse(CHANGELIST) + "?queue=bulk"

    html = first_post(root, "cancel_tasks", [bulk[0]], url, select_across="1").content.decode()

    assert "You selected more than 3 tasks. Of the first 3:" in html
    assert counts_table(html) == [("queued", "3", "canceled")]
    assert "and 1 more" in html and ", and more past those" in html
    assert 'href="/admin/cairnq/task/?queue=bulk"' in html
    inputs = hidden_inputs(html)
    assert ("select_across", "1") in inputs
    assert all(status_of(task_id)[0] == "queued" for task_id in bulk)

    # The form posts back to the same URL, so the confirmed action sees the same filter.
    confirmed = root.post(url, _form_data(inputs), follow=True)
    assert messages_of(confirmed) == ["5 canceled"]
    assert all(status_of(task_id)[0] == "canceled" for task_id in bulk)
    assert status_of(other)[0] == "queued"


def test_confirmation_needs_the_action_permission(store: Any, cairnq_db: Any) -> None:
    ids = [make_task(store).id for _ in range(2)]
    viewer = client_for(staff_user("viewer", "view_task", "retry_task"))
    response = first_post(viewer, "cancel_tasks", ids)
    assert 'id="cairnq-confirm"' not in response.content.decode()
    confirmed = first_post(viewer, "cancel_tasks", ids, post="yes")
    assert confirmed.status_code in (200, 302)
    assert [status_of(task_id)[0] for task_id in ids] == ["queued", "queued"]


def test_select_across_confirmation_reads_bounded_rows(
    store: Any, root: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every query the page makes of the task table carries a LIMIT: "select all" never reads the whole table."""
    monkeypatch.setattr(confirmation, "COUNT_LIMIT", 10)
    # More rows than a page: Django's list reads a single-page result without a LIMIT.
    monkeypatch.setattr(site._registry[Task], "list_per_page", 5)
    ids = [make_task(store, queue="bulk").id for _ in range(25)]
    with CaptureQueriesContext(connections["default"]) as queries:
        html = first_post(root, "cancel_tasks", [ids[0]], reverse(CHANGELIST) + "?queue=bulk", select_across="1")
    assert 'id="cairnq-confirm"' in html.content.decode()
    task_reads = [q["sql"] for q in queries.captured_queries if re.search(r'\bFROM\s+"cairnq_tasks"', q["sql"])]
    unbounded = [sql for sql in task_reads if not re.search(r"\bLIMIT\s+\d+", sql)]
    assert task_reads and not unbounded, unbounded
    assert all("COUNT(" not in sql.upper() or "LIMIT" in sql.upper() for sql in task_reads)
