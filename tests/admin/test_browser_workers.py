"""An operator finds a live worker in Chromium, opens its page, and follows a running task to it and back.

A real worker subprocess registers itself and runs a long task; the workers
list shows it live with the task in flight, its page lists the running task,
and the task's page links back to the worker; its times read as the task
pages' do. Screenshots in light and dark land in ``test-artifacts/``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

import cairnq_django as cq
from cairnq_django.models import Task

from worker.conftest import ledger_dir, start_worker  # noqa: F401 - fixtures
from worker.conftest import wait_until
from .test_browser import CHROMIUM, CHROMIUM_ARGS, page, shot  # noqa: F401 - page is the fixture
from .test_browser_pause import log_in

pytestmark = pytest.mark.browser


def test_operator_follows_a_running_task_to_its_worker_and_back(
    page: Any, live_server: Any, store: Any, start_worker: Any  # noqa: F811
) -> None:
    User.objects.create_superuser("operator", password="s3cret-pass")
    worker = start_worker("--queue", "crunch", "--concurrency", "2")
    worker_id = worker.wait_ready()
    task_id = cq.submit("demo.sleep", {"ms": 60_000}, queue="crunch").id
    wait_until(lambda: Task.objects.filter(id=task_id, status="running").exists(), 20, what="the task running")
    base = live_server.url
    log_in(page, base, "operator", "s3cret-pass")

    page.goto(base + reverse("admin:cairnq_worker_changelist"))
    row = page.locator("#result_list tbody tr").filter(has_text=worker_id)
    assert row.count() == 1
    assert row.locator(".cairnq-badge").inner_text().lower() == "live"
    assert "crunch" in row.inner_text()
    shot(page, "workers-list")
    # Every column fits a 1,400 px window: neither the page nor the list scrolls sideways.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.evaluate("(r => r.scrollWidth <= r.clientWidth)(document.querySelector('#changelist .results'))")
    assert row.locator("td.field-load").inner_text() in ("0 / 2", "1 / 2")  # in flight as of the last beat

    row.get_by_role("link", name=worker_id).click()
    # (The admin's URLs spell "_" in a key as "_5F".)
    page.wait_for_url("**/cairnq/worker/*/change/")
    running = page.locator("table.cairnq-worker-tasks")
    assert task_id in running.inner_text() and "demo.sleep" in running.inner_text()
    # Its times read as a task's timeline reads them (not "…26.384000+00:00").
    for field in ("started_display", "last_seen_display"):
        when = page.locator(f".field-{field} .readonly").inner_text()
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", when), (field, when)
    shot(page, "worker-page")
    page.emulate_media(color_scheme="dark")
    page.wait_for_timeout(500)  # the admin's links fade their colours over 0.15 s
    shot(page, "worker-page-dark")
    page.emulate_media(color_scheme="light")

    running.get_by_role("link", name=task_id).click()
    page.wait_for_url("**/cairnq/task/*/change/")
    assert page.locator(".readonly").filter(has_text=task_id).count() >= 1
    page.get_by_role("link", name=worker_id).click()
    page.wait_for_url("**/cairnq/worker/*/change/")
    assert task_id in page.locator("table.cairnq-worker-tasks").inner_text()
