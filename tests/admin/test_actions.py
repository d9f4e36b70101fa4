"""Cancel and retry from the admin change exactly what they should, for exactly who may.

Pins: an action offered to (or a forged POST honoured for) a user without
``cancel_task`` / ``retry_task``, a POST without a CSRF token that changes a
row, wrong transitions (a finished task canceled, a succeeded one retried),
a result message that hides the skipped rows, and a bulk action over
thousands of rows that issues one statement per row.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from cairnq_django.models import Task

from . import make_task, staff_user, status_of

CHANGELIST = "admin:cairnq_task_changelist"


def act(client: Client, action: str, ids: list[str], **extra: Any) -> Any:
    """Run the action on ``ids`` as confirmed (``post=yes``, what the confirmation page sends)."""
    data = {"action": action, "_selected_action": ids, "index": "0", "post": "yes", **extra}
    return client.post(reverse(CHANGELIST), data, follow=True)


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def root(cairnq_db: Any) -> Client:
    return client_for(User.objects.create_superuser("root", password="pw"))


def test_bulk_cancel_reports_changed_and_skipped(store: Any, root: Client) -> None:
    queued = [make_task(store).id for _ in range(3)]
    running = make_task(store, "running").id
    done = [make_task(store, "succeeded").id, make_task(store, "failed").id]

    response = act(root, "cancel_tasks", [*queued, running, *done])

    assert messages_of(response) == ["3 canceled, 1 cancel requested, 2 skipped: already finished"]
    assert all(status_of(task_id)[0] == "canceled" for task_id in queued)
    status, requested_at, _ = status_of(running)
    assert status == "running" and requested_at is not None
    assert [status_of(task_id)[0] for task_id in done] == ["succeeded", "failed"]


def test_bulk_retry_requeues_failed_and_canceled_only(store: Any, root: Client) -> None:
    failed = make_task(store, "failed").id
    canceled = make_task(store, "canceled").id
    succeeded = make_task(store, "succeeded").id
    queued = make_task(store).id

    response = act(root, "retry_tasks", [failed, canceled, succeeded, queued])

    assert messages_of(response) == ["2 re-queued, 2 skipped: not failed or canceled"]
    assert status_of(failed) == ("queued", None, 1)  # attempt kept
    assert status_of(canceled)[0] == "queued"
    assert status_of(succeeded)[0] == "succeeded"
    row = Task.objects.get(pk=failed)
    assert row.error is None and row.worker_id is None and row.completed_at_ms is None


def test_bulk_retry_can_reset_attempts(store: Any, root: Client) -> None:
    failed = make_task(store, "failed").id
    response = act(root, "retry_tasks_reset_attempts", [failed])
    assert messages_of(response) == ["1 re-queued (attempts reset)"]
    assert status_of(failed) == ("queued", None, 0)


def test_nothing_to_do_is_a_warning(store: Any, root: Client) -> None:
    done = make_task(store, "succeeded").id
    response = act(root, "cancel_tasks", [done])
    [message] = list(response.context["messages"])
    assert str(message) == "0 canceled, 1 skipped: already finished" and message.level_tag == "warning"


def action_names(client: Client) -> set[str]:
    html = client.get(reverse(CHANGELIST)).content.decode()
    return set(re.findall(r'<option value="([a-z_]+)"', html))


@pytest.mark.parametrize(
    ("perms", "offered"),
    [
        ((), set()),
        (("cancel_task",), {"cancel_tasks"}),
        (("retry_task",), {"retry_tasks", "retry_tasks_reset_attempts"}),
        (("cancel_task", "retry_task"), {"cancel_tasks", "retry_tasks", "retry_tasks_reset_attempts"}),
    ],
)
def test_actions_offered_follow_permissions(store: Any, cairnq_db: Any, perms: tuple[str, ...], offered: set[str]) -> None:
    make_task(store)
    client = client_for(staff_user("op", "view_task", *perms))
    assert action_names(client) == offered


def test_staff_without_view_permission_sees_nothing(store: Any, cairnq_db: Any) -> None:
    task = make_task(store).id
    client = client_for(staff_user("op", "cancel_task", "retry_task"))
    assert client.get(reverse(CHANGELIST)).status_code == 403
    assert client.post(reverse(CHANGELIST), {"action": "cancel_tasks", "_selected_action": [task]}).status_code == 403
    assert status_of(task)[0] == "queued"


@pytest.mark.parametrize(
    ("perms", "action", "state"),
    [
        (("view_task",), "cancel_tasks", "queued"),
        (("view_task", "retry_task"), "cancel_tasks", "queued"),
        (("view_task",), "retry_tasks", "failed"),
        (("view_task", "cancel_task"), "retry_tasks", "failed"),
        (("view_task", "cancel_task"), "retry_tasks_reset_attempts", "failed"),
    ],
)
def test_forged_action_post_changes_nothing(
    store: Any, cairnq_db: Any, perms: tuple[str, ...], action: str, state: str
) -> None:
    task = make_task(store, state).id
    before = status_of(task)
    response = act(client_for(staff_user("op", *perms)), action, [task])
    assert response.status_code == 200
    assert status_of(task) == before
    assert not any("re-queued" in text or "canceled," in text for text in messages_of(response))


def test_detail_buttons_follow_permissions_and_state(store: Any, cairnq_db: Any) -> None:
    queued, running, failed, done = (make_task(store, s).id for s in ("queued", "running", "failed", "succeeded"))
    both = client_for(staff_user("both", "view_task", "cancel_task", "retry_task"))
    viewer = client_for(staff_user("viewer", "view_task"))

    def buttons(client: Client, task_id: str) -> set[str]:
        html = client.get(reverse("admin:cairnq_task_change", args=[task_id])).content.decode()
        return set(re.findall(r'<button type="submit" class="cairnq-button[^"]*" name="([a-z_]+)"', html))

    assert buttons(both, queued) == {"cancel"}
    assert buttons(both, running) == {"cancel"}
    assert buttons(both, failed) == {"retry", "retry_reset"}
    assert buttons(both, done) == set()
    assert buttons(viewer, queued) == set() and buttons(viewer, failed) == set()


def test_detail_cancel_and_retry(store: Any, root: Client) -> None:
    queued, running, failed = (make_task(store, s).id for s in ("queued", "running", "failed"))

    response = root.post(reverse("admin:cairnq_task_cancel", args=[queued]), follow=True)
    assert messages_of(response) == ["1 canceled"]
    assert response.redirect_chain[-1][0] == reverse("admin:cairnq_task_change", args=[queued])
    assert status_of(queued)[0] == "canceled"

    response = root.post(reverse("admin:cairnq_task_cancel", args=[running]), follow=True)
    assert messages_of(response) == ["1 cancel requested"]
    assert status_of(running)[0] == "running" and status_of(running)[1] is not None

    response = root.post(reverse("admin:cairnq_task_retry", args=[failed]), {"reset_attempt": "1"}, follow=True)
    assert messages_of(response) == ["1 re-queued (attempts reset)"]
    assert status_of(failed) == ("queued", None, 0)

    response = root.post(reverse("admin:cairnq_task_retry", args=[failed]), follow=True)
    assert messages_of(response) == ["0 re-queued, 1 skipped: not failed or canceled"]


def test_detail_views_refuse_get_and_missing_permission(store: Any, cairnq_db: Any) -> None:
    queued, failed = make_task(store).id, make_task(store, "failed").id
    viewer = client_for(staff_user("viewer", "view_task", "retry_task"))
    assert viewer.get(reverse("admin:cairnq_task_cancel", args=[queued])).status_code == 405
    assert viewer.post(reverse("admin:cairnq_task_cancel", args=[queued])).status_code == 403
    assert status_of(queued)[0] == "queued"
    canceller = client_for(staff_user("canceller", "view_task", "cancel_task"))
    assert canceller.post(reverse("admin:cairnq_task_retry", args=[failed])).status_code == 403
    assert status_of(failed)[0] == "failed"
    anonymous = Client().post(reverse("admin:cairnq_task_cancel", args=[queued]))
    assert anonymous.status_code == 302 and status_of(queued)[0] == "queued"


def test_csrf_is_enforced_for_actions_and_buttons(store: Any, cairnq_db: Any) -> None:
    queued, other = make_task(store).id, make_task(store).id
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_superuser("root", password="pw"))

    forged = client.post(reverse(CHANGELIST), {"action": "cancel_tasks", "_selected_action": [queued], "index": "0"})
    assert forged.status_code == 403
    assert client.post(reverse("admin:cairnq_task_cancel", args=[queued])).status_code == 403
    assert status_of(queued)[0] == "queued"

    # The same requests with the token the page hands out do go through.
    client.get(reverse(CHANGELIST))
    token = client.cookies["csrftoken"].value
    ok = client.post(
        reverse(CHANGELIST),
        {"action": "cancel_tasks", "_selected_action": [queued], "index": "0", "csrfmiddlewaretoken": token},
    )
    assert ok.status_code == 302 and status_of(queued)[0] == "canceled"
    ok = client.post(reverse("admin:cairnq_task_cancel", args=[other]), {"csrfmiddlewaretoken": token})
    assert ok.status_code == 302 and status_of(other)[0] == "canceled"


def test_select_across_ten_thousand_is_a_bounded_number_of_statements(store: Any, root: Client) -> None:
    now_ms = store.now_ms()
    Task.objects.bulk_create(
        Task(
            id=f"task_{i:026d}",
            name="admin.bulk",
            queue="bulk",
            status="queued",
            payload={},
            metadata={},
            attempt=0,
            max_attempts=3,
            priority=0,
            run_at_ms=now_ms,
            created_at_ms=now_ms,
            updated_at_ms=now_ms,
        )
        for i in range(10_000)
    )
    finished = make_task(store, "succeeded", queue="bulk").id
    elsewhere = make_task(store, "queued", queue="other").id

    with CaptureQueriesContext(connections["default"]) as queries:
        response = root.post(
            reverse(CHANGELIST) + "?queue=bulk",
            {
                "action": "cancel_tasks",
                "_selected_action": ["task_" + "0" * 26],
                "select_across": "1",
                "index": "0",
                "post": "yes",
            },
            follow=True,
        )

    assert messages_of(response) == ["10000 canceled, 1 skipped: already finished"]
    assert Task.objects.filter(queue="bulk", status="canceled").count() == 10_000
    assert status_of(finished)[0] == "succeeded"
    assert status_of(elsewhere)[0] == "queued"  # outside the filter, so outside "select all"
    updates = [q["sql"] for q in queries.captured_queries if re.search(r"\bUPDATE\s+cairnq_tasks\b", q["sql"])]
    # 10,001 ids in chunks of 1000: 11 cancel statements, plus a bounded
    # number of reads (one keyset page per chunk) and the admin's own queries.
    assert len(updates) == 11
    # Each chunk's 1,000 log entries are one bulk_create: one INSERT, or as
    # many as the database's cap on parameters per statement makes it (999
    # on SQLite under Django 5.2: 7 columns, 142 rows per INSERT).
    log_insert = re.compile(r'\bINSERT INTO\s+"django_admin_log"')
    logged = [q["sql"] for q in queries.captured_queries if log_insert.search(q["sql"])]
    per_chunk = -(-1000 * 7 // (connections["default"].features.max_query_params or 7000))
    assert len(logged) <= 10 * per_chunk + 1, len(logged)
    assert LogEntry.objects.filter(user__username="root", change_message="Canceled.").count() == 10_000
    others = len(queries.captured_queries) - len(logged)
    assert others < 60, others


@pytest.mark.parametrize(
    ("button", "perms", "allowed"),
    [
        ("cancel", ("cancel_task",), False),
        ("cancel", ("view_task",), False),
        ("cancel", ("view_task", "cancel_task"), True),
        ("retry", ("retry_task",), False),
        ("retry", ("view_task", "cancel_task"), False),
        ("retry", ("view_task", "retry_task"), True),
    ],
)
def test_detail_buttons_need_the_same_permissions_as_the_actions(
    store: Any, cairnq_db: Any, button: str, perms: tuple[str, ...], allowed: bool
) -> None:
    """A button's URL asks for view + cancel (or view + retry), as the list's action does."""
    task = make_task(store, "queued" if button == "cancel" else "failed").id
    before = status_of(task)
    client = client_for(staff_user("operator", *perms))
    # The action is offered on the list exactly when the button's URL is honoured.
    changelist = client.get(reverse(CHANGELIST))
    offered = changelist.status_code == 200 and f'value="{button}_tasks"' in changelist.content.decode()
    assert offered is allowed

    response = client.post(reverse(f"admin:cairnq_task_{button}", args=[task]))
    if allowed:
        assert response.status_code == 302 and status_of(task)[0] == ("canceled" if button == "cancel" else "queued")
    else:
        assert response.status_code == 403 and status_of(task) == before
    # Still POST-only, for everyone.
    assert client.get(reverse(f"admin:cairnq_task_{button}", args=[task])).status_code == 405
