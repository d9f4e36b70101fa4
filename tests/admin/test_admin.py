"""The task admin shows the queue truthfully and cheaply, and never edits a row.

Pins: a missing or wrong column (badge, "cancel requested", progress, local
times), filters or search that miss or over-match, unescaped payloads on the
detail page, an add/change/delete path that bypasses the store, page views
that count or DISTINCT-scan the whole table, a sidebar marking "Tasks" on the
dashboard, and docs naming an admin page other than the admin does.
"""

from __future__ import annotations

import datetime
import re
import time
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.db import connections
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.text import capfirst

from cairnq_django.admin import paginator
from cairnq_django.models import Task

from . import ROW_ID, make_task, staff_user

CHANGELIST = "admin:cairnq_task_changelist"


def change_url(task_id: str) -> str:
    return reverse("admin:cairnq_task_change", args=[task_id])


@pytest.fixture
def superuser_client(cairnq_db: Any) -> Client:
    from django.contrib.auth.models import User

    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def row_ids(html: str) -> list[str]:
    """Return the task ids of the changelist rows, in page order."""
    return re.findall(ROW_ID, html, re.S)


def test_changelist_shows_columns_badges_and_local_times(store: Any, superuser_client: Client) -> None:
    queued = make_task(store, "queued", queue="emails")
    running = make_task(store, "running")
    store.progress(running.id, "worker_admin_tests", 0.4, "resizing <img>")
    requested = make_task(store, "cancel_requested")
    failed = make_task(store, "failed")

    with override_settings(TIME_ZONE="Asia/Kolkata"), timezone.override("Asia/Kolkata"):
        html = superuser_client.get(reverse(CHANGELIST)).content.decode()
        created = Task.objects.get(pk=queued.id).created_at
        created_local = formats.localize(timezone.localtime(created))
    created_utc = formats.localize(timezone.localtime(created, datetime.timezone.utc))

    assert set(row_ids(html)) == {queued.id, running.id, requested.id, failed.id}
    assert 'class="cairnq-badge cairnq-badge--queued"' in html
    assert 'class="cairnq-badge cairnq-badge--failed"' in html
    assert html.count("cairnq-badge--cancel-requested") == 1
    assert '<progress max="1" value="0.400">' in html
    # The progress message is shown, escaped.
    assert "resizing &lt;img&gt;" in html and "<img>" not in html
    assert "1 / 3" in html and "0 / 3" in html
    assert "emails" in html
    # Times are rendered in the active (user's) time zone, not UTC.
    assert created_local in html and created_utc not in html
    assert 'href="/static/cairnq/admin.css"' in html


def test_list_columns_fit_and_clip_with_titles(store: Any, superuser_client: Client) -> None:
    """The list keeps the columns chosen for a 1,400 px window; long values are whole in titles, empties "—"."""
    long_name = "reports." + "monthly_statement_" * 8
    failed = make_task(store, "failed", name=long_name, queue="q-" + "x" * 60)
    queued = make_task(store)
    html = superuser_client.get(reverse(CHANGELIST)).content.decode()
    columns = re.findall(r'<th scope="col" class="[^"]*column-([a-z_]+)', html)
    assert columns == ["task_cell", "queue_cell", "status_cell", "progress_bar", "created_display", "payload_preview"]
    # Whole values stay in the page (the stylesheet clips them), with a title to hover.
    assert f'<span class="cairnq-clip cairnq-name" title="{long_name}">{long_name}</span>' in html
    assert f'title="q-{"x" * 60}"' in html
    assert f'<span class="cairnq-id" title="{failed.id}"><span class="cairnq-id-head">{failed.id[:-6]}</span>' in html
    # A failed task shows its error under its id; the envelope's type and message.
    assert '<span class="cairnq-clip cairnq-list-error" title="ValueError: boom">ValueError: boom</span>' in html
    # No progress reads "—", and no cell falls back to Django's "-".
    queued_row = html[html.index(f'title="{queued.id}"') :]
    queued_row = queued_row[: queued_row.index("</tr>")]
    assert '<td class="field-progress_bar">—</td>' in queued_row
    assert ">-<" not in html[html.index('id="result_list"') : html.index("</table>")]


def test_changelist_is_newest_first(store: Any, superuser_client: Client) -> None:
    made = []
    for _ in range(3):
        made.append(make_task(store).id)
        time.sleep(0.003)  # a new millisecond, so the ULIDs order by creation
    html = superuser_client.get(reverse(CHANGELIST)).content.decode()
    assert row_ids(html) == made[::-1]
    created = [Task.objects.get(pk=task_id).created_at_ms for task_id in row_ids(html)]
    assert created == sorted(created, reverse=True)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"status": "queued"}, {"queued", "reports", "named"}),
        ({"status": "failed"}, {"failed"}),
        ({"status": "running"}, {"running", "cancel_requested"}),
        ({"status": "cancel_requested"}, {"cancel_requested"}),
        ({"queue": "reports"}, {"reports"}),
        ({"name": "admin.named"}, {"named"}),
        ({"queue": "reports", "status": "queued"}, {"reports"}),
        ({"queue": "reports", "status": "failed"}, set()),
        ({"queue": "nope"}, set()),
    ],
)
def test_filters(store: Any, superuser_client: Client, query: dict[str, str], expected: set[str]) -> None:
    tasks = {
        "queued": make_task(store, "queued"),
        "failed": make_task(store, "failed"),
        "running": make_task(store, "running"),
        "cancel_requested": make_task(store, "cancel_requested"),
        "reports": make_task(store, "queued", queue="reports"),
        "named": make_task(store, "queued", name="admin.named"),
    }
    response = superuser_client.get(reverse(CHANGELIST), query)
    assert response.status_code == 200
    by_id = {task.id: label for label, task in tasks.items()}
    assert {by_id[task_id] for task_id in row_ids(response.content.decode())} == expected


def test_text_filter_form_keeps_the_other_parameters(store: Any, superuser_client: Client) -> None:
    make_task(store)
    html = superuser_client.get(reverse(CHANGELIST), {"status": "queued", "q": "x", "p": "0"}).content.decode()
    form = html[html.index('class="cairnq-filter-form"') :]
    form = form[: form.index("</form>")]
    assert '<input type="hidden" name="status" value="queued">' in form
    assert '<input type="hidden" name="q" value="x">' in form
    assert 'name="p"' not in form


def test_queue_filter_suggests_configured_queues_not_table_values(store: Any, superuser_client: Client) -> None:
    make_task(store, queue="only-in-the-table")
    with override_settings(CAIRNQ={"QUEUES": ["emails", "video"]}):
        html = superuser_client.get(reverse(CHANGELIST)).content.decode()
    queue_filter = html[html.index('data-filter-title="queue"') :]
    queue_filter = queue_filter[: queue_filter.index("</details>")]
    assert "?queue=emails" in queue_filter and "?queue=video" in queue_filter
    assert "only-in-the-table" not in queue_filter


@pytest.mark.parametrize("field", ["id", "key", "name", "correlation_id"])
def test_search_is_exact_on_id_key_name_and_correlation(store: Any, superuser_client: Client, field: str) -> None:
    target = make_task(store, name="admin.search-me", key="order-42", correlation_id="corr-7")
    make_task(store, name="admin.search-me-not", key="order-420", correlation_id="corr-70")
    term = {"id": target.id, "key": "order-42", "name": "admin.search-me", "correlation_id": "corr-7"}[field]
    html = superuser_client.get(reverse(CHANGELIST), {"q": term}).content.decode()
    assert row_ids(html) == [target.id]


def test_page_view_never_counts_or_distincts_the_whole_table(store: Any, superuser_client: Client) -> None:
    for _ in range(3):
        make_task(store)
    with CaptureQueriesContext(connections["default"]) as queries:
        assert superuser_client.get(reverse(CHANGELIST), {"status": "queued", "queue": "default"}).status_code == 200
    task_sql = [q["sql"] for q in queries.captured_queries if "cairnq_tasks" in q["sql"]]
    assert task_sql, "the changelist must read the task table"
    for sql in task_sql:
        assert "DISTINCT" not in sql.upper(), sql
        if "COUNT(" in sql.upper():
            # Only the capped count: COUNT over a LIMITed subquery.
            assert "LIMIT" in sql.upper(), sql


def test_paginator_caps_the_count(store: Any, superuser_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paginator, "COUNT_CAP", 3)
    for _ in range(5):
        make_task(store)
    filtered = paginator.EstimatedCountPaginator(Task.objects.filter(status="queued").order_by("pk"), 2)
    assert filtered.count == 3 and filtered.estimated == "more"
    small = paginator.EstimatedCountPaginator(Task.objects.filter(status="failed").order_by("pk"), 2)
    assert small.count == 0 and small.estimated is None

    everything = paginator.EstimatedCountPaginator(Task.objects.order_by("pk"), 2)
    if connections["default"].vendor == "postgresql":
        with connections["default"].cursor() as cursor:
            cursor.execute("ANALYZE cairnq_tasks")
        # Past the cap, the planner's row estimate stands in for COUNT(*).
        assert everything.count == 5 and everything.estimated == "about"
    else:
        assert everything.count == 3 and everything.estimated == "more"
    html = superuser_client.get(reverse(CHANGELIST), {"status": "queued"}).content.decode()
    assert re.search(r"more than\s+3\s+tasks", html)


def test_detail_page_is_read_only_escaped_and_linked(store: Any, superuser_client: Client) -> None:
    parent = make_task(store)
    child = make_task(
        store,
        "running",
        key="invoice-9",
        payload={"html": "<script>alert(1)</script>", "n": 1},
        parent_id=parent.id,
        root_id=parent.id,
        correlation_id="corr-<b>",
        metadata_json='{"owner": "<i>ops</i>"}',
    )
    response = superuser_client.get(change_url(child.id))
    assert response.status_code == 200
    html = response.content.decode()
    assert "<script>alert(1)</script>" not in html
    # Pretty-printed (indented, one member per line) and escaped.
    assert '<pre class="cairnq-json">{\n  &quot;html&quot;: &quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;,\n  &quot;n&quot;: 1\n}</pre>' in html
    assert "&lt;i&gt;ops&lt;/i&gt;" in html and "corr-&lt;b&gt;" in html
    assert "invoice-9" in html
    assert f'<a href="{change_url(parent.id)}">{parent.id}</a>' in html
    assert "worker_admin_tests" in html
    assert "cairnq-timeline" in html
    # No input of the task row is editable and no save button is offered.
    assert 'name="_save"' not in html and 'name="name"' not in html


def test_failed_task_shows_the_error_envelope(store: Any, superuser_client: Client) -> None:
    failed = make_task(store, "failed")
    html = superuser_client.get(change_url(failed.id)).content.decode()
    assert "&quot;code&quot;: &quot;handler_error&quot;" in html


def test_nobody_adds_changes_or_deletes(store: Any, superuser_client: Client) -> None:
    task = make_task(store)
    assert superuser_client.get(reverse("admin:cairnq_task_add")).status_code == 403
    posted = superuser_client.post(change_url(task.id), {"name": "hacked", "status": "succeeded"})
    assert posted.status_code == 403
    assert superuser_client.post(reverse("admin:cairnq_task_delete", args=[task.id]), {"post": "yes"}).status_code == 403
    changelist = superuser_client.get(reverse(CHANGELIST)).content.decode()
    assert "delete_selected" not in changelist
    response = superuser_client.post(
        reverse(CHANGELIST), {"action": "delete_selected", "_selected_action": [task.id], "post": "yes"}
    )
    assert response.status_code in (200, 302)
    row = Task.objects.get(pk=task.id)
    assert (row.name, row.status) == (task.name, "queued")


def test_dashboard_figures_and_links(store: Any, superuser_client: Client) -> None:
    make_task(store, "queued", queue="emails")
    make_task(store, "queued", queue="emails")
    make_task(store, "failed", queue="emails")
    make_task(store, "cancel_requested", queue="video")
    expiring = make_task(store, "running", queue="video")
    store.heartbeat(expiring.id, "worker_admin_tests", 5_000)

    index = superuser_client.get(reverse("admin:app_list", args=["cairnq"])).content.decode()
    dashboard_url = reverse("admin:cairnq_task_dashboard")
    assert f'href="{dashboard_url}"' in index
    assert f'href="{dashboard_url}"' in superuser_client.get(reverse(CHANGELIST)).content.decode()

    response = superuser_client.get(dashboard_url)
    assert response.status_code == 200
    rows = {row.queue: row for row in response.context["rows"]}
    assert set(rows) == {"emails", "video"}
    assert rows["emails"].counts["queued"] == 2 and rows["emails"].counts["failed"] == 1
    assert rows["emails"].failed_last_hour == 1
    assert rows["emails"].oldest_queued_ms is not None and rows["emails"].oldest_queued_age != "—"
    assert rows["video"].counts["running"] == 2
    assert rows["video"].cancel_requested == 1
    assert rows["video"].leases_expiring == 1 and rows["video"].leases_expired == 0
    html = response.content.decode()
    assert "Failures in the last hour" in html and "?queue=emails&amp;status=failed" in html
    # Plain HTML and the app's own CSS: nothing is fetched from elsewhere.
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert 'href="/static/cairnq/admin.css"' in html


def test_dashboard_needs_view_permission(store: Any, cairnq_db: Any) -> None:
    client = Client()
    client.force_login(staff_user("nobody"))
    assert client.get(reverse("admin:cairnq_task_dashboard")).status_code == 403
    client.force_login(staff_user("viewer", "view_task"))
    assert client.get(reverse("admin:cairnq_task_dashboard")).status_code == 200
    anonymous = Client().get(reverse("admin:cairnq_task_dashboard"))
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]


# The sidebar rows Django's admin/app_list.html marks as the current page.
CURRENT_ROW = re.compile(r'<tr class="model-([a-z_]+) current-model">')


def sidebar_current(html: str) -> list[str]:
    sidebar = html[html.index('<nav class="sticky" id="nav-sidebar"') :]
    return CURRENT_ROW.findall(sidebar[: sidebar.index("</nav>")])


def test_sidebar_marks_the_dashboard_not_tasks(store: Any, superuser_client: Client) -> None:
    """The dashboard lives under the task admin's URLs; the sidebar still marks its own entry."""
    make_task(store, "queued", queue="emails")
    html = superuser_client.get(reverse("admin:cairnq_task_dashboard")).content.decode()
    assert sidebar_current(html) == ["queuedashboard"]
    dashboard_entry = reverse("admin:cairnq_queuedashboard_changelist")
    assert f'<a href="{dashboard_entry}" aria-current="page">' in html
    # The app stays marked, and the task list and the worker list mark their own rows.
    assert 'class="app-cairnq module current-app"' in html
    assert sidebar_current(superuser_client.get(reverse(CHANGELIST)).content.decode()) == ["task"]
    workers = superuser_client.get(reverse("admin:cairnq_worker_changelist")).content.decode()
    assert sidebar_current(workers) == ["worker"]


# "*Task queue › Workers*" and the like: a path through the admin, as the docs write it.
DOCS_ADMIN_PATH = re.compile(r"(\*\*?)([^*\n›]+?) › ([^*\n›]+?)\1")


def test_the_docs_name_admin_pages_as_the_admin_does() -> None:
    """Every "App › Page" the docs write is the app's name and an entry the admin lists under it."""
    app = apps.get_app_config("cairnq")
    registered = [model for model in app.get_models() if admin.site.is_registered(model)]
    entries = {str(capfirst(model._meta.verbose_name_plural)) for model in registered}
    docs = Path(__file__).resolve().parents[2] / "docs"
    paths = [
        (page.name, section, entry)
        for page in sorted(docs.glob("*.md"))
        for _mark, section, entry in DOCS_ADMIN_PATH.findall(page.read_text())
    ]
    assert paths, "the docs name no admin page at all"
    wrong = [path for path in paths if path[1] != app.verbose_name or path[2] not in entries]
    assert not wrong, f"the admin shows {app.verbose_name!r} › one of {sorted(entries)}"
