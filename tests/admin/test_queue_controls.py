"""The dashboard's Pause and Resume controls.

Pins: a card without its queue's pause state (or a paused queue without
tasks missing its card); a button shown to a user without
``cairnq.pause_queue``; a POST that works without that permission, without
``view_task``, without a CSRF token or by GET; an action with no
``LogEntry`` (or one against the wrong content type, or logged when nothing
changed); and a bad queue name that writes anything.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import reverse

import cairnq_django as cq
from cairnq_django.models import QueuePause

from . import make_task, staff_user

DASHBOARD = "admin:cairnq_task_dashboard"


def control(name: str) -> str:
    return reverse("admin:cairnq_task_queue_control", args=[name])


def login(user: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def operator(username: str, *, view: bool = True, pause: bool = True) -> User:
    """A staff user with ``view_task`` and/or ``cairnq.pause_queue``."""
    user = staff_user(username, *(["view_task"] if view else []))
    if pause:
        content_type = ContentType.objects.get_for_model(QueuePause)
        user.user_permissions.add(Permission.objects.get(content_type=content_type, codename="pause_queue"))
    return User.objects.get(pk=user.pk)


def forms(html: str) -> list[tuple[str, str]]:
    """(action URL, queue) of every control form on the page."""
    found = re.findall(r'<form method="post" action="([^"]+)">.*?name="queue" value="([^"]*)"', html, flags=re.S)
    return [(action, queue) for action, queue in found if "/dashboard/" in action]


def pauses() -> list[tuple[str, str, str]]:
    return [(p.queue, p.paused_by, p.reason) for p in cq.paused_queues()]


def test_operator_pauses_and_resumes_from_the_dashboard(store: Any) -> None:
    make_task(store, "queued", queue="emails")
    make_task(store, "queued", queue="video")
    client = login(operator("ops"))

    html = client.get(reverse(DASHBOARD)).content.decode()
    assert sorted(forms(html)) == sorted([(control("pause"), "emails"), (control("pause"), "video")])
    assert html.count('cairnq-badge--active') == 2

    response = client.post(control("pause"), {"queue": "emails", "reason": "provider outage"}, follow=True)
    assert response.redirect_chain == [(reverse(DASHBOARD), 302)]
    assert pauses() == [("emails", "ops", "provider outage")]
    html = response.content.decode()
    assert "Paused queue “emails”: provider outage" in html
    assert sorted(forms(html)) == sorted([(control("resume"), "emails"), (control("pause"), "video")])
    assert "cairnq-badge--paused" in html and "provider outage" in html and "by ops" in html
    rows = {row.queue: row for row in response.context["rows"]}
    assert rows["emails"].pause is not None and rows["video"].pause is None

    entry = LogEntry.objects.get()
    assert entry.action_flag == CHANGE and entry.user.username == "ops"
    assert entry.content_type == ContentType.objects.get_for_model(QueuePause)
    assert (entry.object_id, entry.object_repr) == ("emails", "emails")
    assert entry.get_change_message() == "Paused queue “emails”: provider outage"

    response = client.post(control("resume"), {"queue": "emails"}, follow=True)
    assert pauses() == []
    assert "Resumed queue “emails”." in response.content.decode()
    latest = LogEntry.objects.order_by("-pk").first()
    assert latest is not None and latest.get_change_message() == "Resumed queue “emails”."
    assert latest.content_type == ContentType.objects.get_for_model(QueuePause) and latest.object_id == "emails"
    assert LogEntry.objects.count() == 2


def test_a_repeated_pause_or_resume_changes_and_logs_nothing(store: Any) -> None:
    client = login(operator("ops"))
    cq.pause_queue("emails", reason="first", by="alice")
    response = client.post(control("pause"), {"queue": "emails", "reason": "second"}, follow=True)
    assert "Queue “emails” was already paused." in response.content.decode()
    assert pauses() == [("emails", "alice", "first")]
    response = client.post(control("resume"), {"queue": "idle"}, follow=True)
    assert "Queue “idle” was not paused." in response.content.decode()
    assert LogEntry.objects.count() == 0


def test_a_paused_queue_without_tasks_has_a_card(store: Any) -> None:
    cq.pause_queue("quiet", by="alice")
    html = login(operator("ops")).get(reverse(DASHBOARD)).content.decode()
    assert forms(html) == [(control("resume"), "quiet")]
    assert "cairnq-badge--paused" in html and "by alice" in html


def test_a_viewer_sees_the_state_but_no_button_and_cannot_post(store: Any) -> None:
    make_task(store, "queued", queue="emails")
    cq.pause_queue("video", reason="maintenance")
    viewer = login(operator("viewer", pause=False))
    html = viewer.get(reverse(DASHBOARD)).content.decode()
    assert forms(html) == []
    assert "cairnq-badge--paused" in html and "maintenance" in html and "cairnq-badge--active" in html
    assert viewer.post(control("pause"), {"queue": "emails"}).status_code == 403
    assert viewer.post(control("resume"), {"queue": "video"}).status_code == 403
    assert pauses() == [("video", "", "maintenance")]
    assert LogEntry.objects.count() == 0


def test_the_pause_permission_alone_does_not_open_the_controls(store: Any) -> None:
    blind = login(operator("blind", view=False))
    assert blind.post(control("pause"), {"queue": "emails"}).status_code == 403
    assert pauses() == []


def test_a_post_without_the_csrf_token_is_refused(store: Any) -> None:
    client = login(User.objects.create_superuser("root", password="pw"), csrf=True)
    assert client.post(control("pause"), {"queue": "emails"}).status_code == 403
    assert pauses() == []
    # The dashboard's own form carries the token.
    client.get(reverse(DASHBOARD))
    token = client.cookies["csrftoken"].value
    assert client.post(control("pause"), {"queue": "emails", "csrfmiddlewaretoken": token}).status_code == 302
    assert [queue for queue, _, _ in pauses()] == ["emails"]


def test_only_posts_to_known_controls(store: Any) -> None:
    client = login(operator("ops"))
    assert client.get(control("pause") + "?queue=emails").status_code == 405
    assert client.post(control("explode"), {"queue": "emails"}).status_code == 404
    assert pauses() == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "Pause refused: name must be a non-empty string"),
        ({"queue": "a\x00b"}, "Pause refused: name must not contain NUL"),
        ({"queue": "q" * 1025}, "Pause refused: name must be at most 1024 bytes"),
        ({"queue": "emails", "reason": "r" * 1025}, "Pause refused: reason must be at most 1024 bytes"),
    ],
)
def test_bad_input_is_reported_and_writes_nothing(store: Any, data: dict[str, str], message: str) -> None:
    response = login(operator("ops")).post(control("pause"), data, follow=True)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert pauses() == [] and LogEntry.objects.count() == 0

