"""Pin that the admin index links to the queue dashboard for those who may
view tasks, and shows nothing to staff who may not."""

from __future__ import annotations

from typing import Any

from django.test import Client
from django.urls import reverse

from . import staff_user


def test_index_links_the_dashboard_for_task_viewers(cairnq_db: Any) -> None:
    staff_user("viewer", "view_task")
    client = Client()
    client.login(username="viewer", password="pw")
    index = client.get(reverse("admin:index"))
    entry = reverse("admin:cairnq_queuedashboard_changelist")
    assert entry in index.content.decode()
    assert "Queue dashboard" in index.content.decode()
    followed = client.get(entry)
    assert followed.status_code == 302
    assert followed["Location"] == reverse("admin:cairnq_task_dashboard")
    assert client.get(followed["Location"]).status_code == 200


def test_index_hides_the_dashboard_from_other_staff(cairnq_db: Any) -> None:
    staff_user("outsider")
    client = Client()
    client.login(username="outsider", password="pw")
    index = client.get(reverse("admin:index"))
    assert reverse("admin:cairnq_queuedashboard_changelist") not in index.content.decode()
    assert client.get(reverse("admin:cairnq_queuedashboard_changelist")).status_code == 403
