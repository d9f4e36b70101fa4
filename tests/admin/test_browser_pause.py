"""An operator in Chromium pauses and resumes a queue from the dashboard.

Pins what the test client cannot see: the rendered Pause form (with its
reason field) and Resume button post with the page's CSRF token and change
the database, the card shows the pause, and a user without the permission
gets the state without the buttons. Screenshots land in ``test-artifacts/``.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

import cairnq_django as cq

from . import make_task, staff_user
from .test_browser import message_text, page, shot  # noqa: F401 - page is the fixture

pytestmark = pytest.mark.browser


def log_in(page: Any, base: str, username: str, password: str) -> None:  # noqa: F811
    page.goto(f"{base}/admin/login/?next=/admin/cairnq/task/dashboard/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/cairnq/task/dashboard/")


def card(page: Any, queue: str) -> Any:  # noqa: F811
    return page.locator(".cairnq-queue").filter(has=page.get_by_role("heading", name=queue, exact=True))


def test_operator_pauses_and_resumes_a_queue(page: Any, live_server: Any, store: Any) -> None:  # noqa: F811
    make_task(store, "queued", queue="emails")
    make_task(store, "queued", queue="emails")
    make_task(store, "succeeded", queue="reports")
    User.objects.create_superuser("operator", password="s3cret-pass")
    base = live_server.url
    log_in(page, base, "operator", "s3cret-pass")
    assert page.locator(".cairnq-badge--active").count() == 2
    shot(page, "dashboard-queues-active")

    emails = card(page, "emails")
    emails.locator('input[name="reason"]').fill("provider outage")
    emails.locator('button[name="pause"]').click()
    page.wait_for_selector("ul.messagelist")
    assert "Paused queue “emails”: provider outage" in message_text(page)
    assert [(p.queue, p.paused_by, p.reason) for p in cq.paused_queues()] == [("emails", "operator", "provider outage")]
    emails = card(page, "emails")
    assert emails.locator(".cairnq-badge--paused").count() == 1
    assert "provider outage" in emails.locator(".cairnq-queue-state").inner_text()
    assert emails.locator('button[name="resume"]').count() == 1
    assert card(page, "reports").locator('button[name="pause"]').count() == 1
    shot(page, "dashboard-queue-paused")

    # Someone who may view tasks but not pause sees the state, not the buttons.
    viewer = staff_user("viewer", "view_task")
    viewer.set_password("v1ewer-pass")
    viewer.save()
    page.context.clear_cookies()
    log_in(page, base, "viewer", "v1ewer-pass")
    assert page.locator(".cairnq-badge--paused").count() == 1
    assert page.locator(".cairnq-queue-controls").count() == 0
    shot(page, "dashboard-queue-paused-viewer")

    page.context.clear_cookies()
    log_in(page, base, "operator", "s3cret-pass")
    card(page, "emails").locator('button[name="resume"]').click()
    page.wait_for_selector("ul.messagelist")
    assert "Resumed queue “emails”." in message_text(page)
    assert cq.paused_queues() == []
    assert page.locator(".cairnq-badge--active").count() == 2

    # On a phone-sized screen the controls fit: no horizontal scrolling.
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    shot(page, "dashboard-queue-controls-phone")
