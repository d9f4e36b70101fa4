"""Every cancel and retry from the admin is in Django's admin log, and the task's History shows it.

Pins: an action or button that changes tasks and logs nothing (or logs the
skipped ones too), an entry against the wrong user, content type or object
id, a History page that stays empty or fails for the unmanaged, text-keyed
task model (ids with characters the admin quotes included), and a bulk action
that writes its log one INSERT per task.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from cairnq_django.models import Task

from . import make_task
from .test_actions import act, client_for

LOG_INSERT = re.compile(r'\bINSERT INTO\s+"django_admin_log"')


@pytest.fixture
def root(cairnq_db: Any) -> Client:
    return client_for(User.objects.create_superuser("root", password="pw"))


def entries() -> list[tuple[str, str, str, int, str]]:
    return [
        (e.user.username, e.object_id, e.object_repr, e.action_flag, e.get_change_message())
        for e in LogEntry.objects.select_related("user").order_by("object_id")
    ]


def history(client: Client, task_id: str) -> str:
    response = client.get(reverse("admin:cairnq_task_history", args=[quote(task_id)]))
    assert response.status_code == 200
    return response.content.decode()


def test_bulk_cancel_logs_each_changed_task_and_history_shows_it(store: Any, root: Client) -> None:
    queued = make_task(store)
    running = make_task(store, "running")
    done = make_task(store, "succeeded")

    act(root, "cancel_tasks", [queued.id, running.id, done.id])

    assert entries() == sorted(
        [
            ("root", queued.id, f"{queued.name} [{queued.id}]", CHANGE, "Canceled."),
            ("root", running.id, f"{running.name} [{running.id}]", CHANGE, "Cancel requested."),
        ],
        key=lambda entry: entry[1],
    )
    task_type = ContentType.objects.get_for_model(Task)
    assert set(LogEntry.objects.values_list("content_type", flat=True)) == {task_type.pk}
    page = history(root, queued.id)
    assert "Canceled." in page and "root" in page
    assert "This object doesn’t have a change history" in history(root, done.id)


def test_retry_logs_with_or_without_reset(store: Any, root: Client) -> None:
    failed, canceled, queued = make_task(store, "failed"), make_task(store, "canceled"), make_task(store)
    act(root, "retry_tasks", [failed.id, queued.id])
    act(root, "retry_tasks_reset_attempts", [canceled.id])
    assert [(object_id, message) for _, object_id, _, _, message in entries()] == sorted(
        [(failed.id, "Re-queued."), (canceled.id, "Re-queued, attempts reset.")]
    )
    assert "Re-queued." in history(root, failed.id)


def test_detail_buttons_log(store: Any, root: Client) -> None:
    queued, failed = make_task(store), make_task(store, "failed")
    root.post(reverse("admin:cairnq_task_cancel", args=[queued.id]))
    root.post(reverse("admin:cairnq_task_retry", args=[failed.id]), {"reset_attempt": "1"})
    root.post(reverse("admin:cairnq_task_retry", args=[queued.id]))  # now canceled, so re-queued
    messages = {(object_id, message) for _, object_id, _, _, message in entries()}
    assert messages == {(queued.id, "Canceled."), (failed.id, "Re-queued, attempts reset."), (queued.id, "Re-queued.")}
    page = history(root, queued.id)
    assert page.index("Canceled.") < page.index("Re-queued.")  # oldest first, as Django lists them


def test_history_of_a_foreign_id_the_admin_quotes(store: Any, root: Client) -> None:
    """Another SDK's id may hold "/", "_" and ":", which admin URLs quote; the log and History still match."""
    now = store.now_ms()
    task_id = "upstream/job_5F:42"
    Task.objects.create(
        id=task_id, name="upstream.job", queue="default", status="queued", payload={}, metadata={},
        attempt=0, max_attempts=3, priority=0, run_at_ms=now, created_at_ms=now, updated_at_ms=now,
    )
    act(root, "cancel_tasks", [task_id])
    assert [(object_id, message) for _, object_id, _, _, message in entries()] == [(task_id, "Canceled.")]
    page = history(root, task_id)
    assert "Canceled." in page and "upstream.job" in page
    # The entry's link (Recent actions) leads back to the task's page.
    link = LogEntry.objects.get().get_admin_url()
    assert root.get(link).status_code == 200


def test_bulk_log_is_one_insert_not_one_per_task(store: Any, root: Client) -> None:
    ids = [make_task(store).id for _ in range(100)]
    with CaptureQueriesContext(connections["default"]) as queries:
        act(root, "cancel_tasks", ids)
    inserts = [q["sql"] for q in queries.captured_queries if LOG_INSERT.search(q["sql"])]
    # 100 rows of 7 columns: 700 parameters, one INSERT on both dialects (SQLite's cap is 999 or more).
    assert len(inserts) == 1
    assert LogEntry.objects.count() == 100
