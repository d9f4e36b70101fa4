"""An operator in a real browser can filter, cancel, request cancel and retry.

Pins what the test client cannot see: the rendered forms, buttons and
JavaScript-free action bar actually work end to end in Chromium against a
live server, and each click changes the database. Screenshots land in
``test-artifacts/`` for a human to look at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections

from cairnq_django.admin.task_admin import has_no_handler
from cairnq_django.models import Task

from . import make_task, status_of

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.browser


@pytest.fixture
def page(live_server: Any, cairnq_db: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API keeps an event loop on this thread; the test's own
    # ORM calls are still synchronous and safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            page = context.new_page()
            page.set_default_timeout(15_000)
            yield page
        finally:
            browser.close()
            # Inside sync_playwright the ORM calls of the test ran in another
            # contextvars context, so they opened their own connection; close
            # it here, or PostgreSQL refuses to drop the test database.
            connections.close_all()


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"admin-{name}.png"), full_page=True)


def message_text(page: Any) -> str:
    return page.locator("ul.messagelist").inner_text()


def test_operator_filters_cancels_and_retries(page: Any, live_server: Any, store: Any) -> None:
    queued = make_task(store, "queued", payload={"to": "a@example.com"}).id
    other = make_task(store, "queued").id
    running = make_task(store, "running").id
    failed = make_task(store, "failed").id
    User.objects.create_superuser("operator", password="s3cret-pass")
    base = live_server.url

    page.goto(f"{base}/admin/login/?next=/admin/cairnq/task/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "s3cret-pass")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/cairnq/task/")
    assert page.locator("#result_list tbody tr").count() == 4
    # Live tasks no handler here serves carry the "no handler" badge (F18 b).
    unserved = sum(has_no_handler(task) for task in Task.objects.all())
    assert unserved == 3  # two queued and one running task, names no handler serves
    assert page.locator(".cairnq-badge--no-handler").count() == unserved
    shot(page, "changelist")

    # Filter by status: only the two queued tasks remain.
    page.locator("#changelist-filter").get_by_role("link", name="Queued", exact=True).click()
    page.wait_for_url("**status=queued**")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 2
    assert {rows.nth(i).locator("th a .cairnq-id").get_attribute("title") for i in range(2)} == {queued, other}
    shot(page, "filtered-queued")

    # Bulk action: cancel one queued task.
    page.check(f'input[name="_selected_action"][value="{queued}"]')
    page.select_option('select[name="action"]', "cancel_tasks")
    page.click('button[name="index"]')
    page.wait_for_selector("ul.messagelist")
    assert "1 canceled" in message_text(page)
    assert status_of(queued)[0] == "canceled"
    assert status_of(other)[0] == "queued"
    shot(page, "after-cancel")

    # Detail page button: request cancel of a running task.
    page.goto(f"{base}/admin/cairnq/task/{running}/change/")
    page.click('button[name="cancel"]')
    page.wait_for_selector("ul.messagelist")
    assert "1 cancel requested" in message_text(page)
    status, requested_at, _ = status_of(running)
    assert status == "running" and requested_at is not None
    assert page.locator(".cairnq-badge--cancel-requested").count() == 1
    shot(page, "cancel-requested")

    # Detail page button: retry a failed task, resetting its attempts.
    page.goto(f"{base}/admin/cairnq/task/{failed}/change/")
    page.click('button[name="retry_reset"]')
    page.wait_for_selector("ul.messagelist")
    assert "1 re-queued (attempts reset)" in message_text(page)
    assert status_of(failed) == ("queued", None, 0)
    shot(page, "after-retry")

    # The dashboard, on a phone-sized screen: no horizontal scrolling.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{base}/admin/cairnq/task/dashboard/")
    assert page.locator(".cairnq-queue").count() == 1
    assert page.locator(".cairnq-count--queued .cairnq-count-value").inner_text() == "2"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    shot(page, "dashboard-phone")


def test_hostile_rows_read_well(page: Any, live_server: Any, store: Any) -> None:
    """A row with odd stored values renders marked, not broken; screenshots for a human."""
    odd = make_task(store, "running").id
    failed = make_task(store, "running").id
    store.fail(
        failed,
        "worker_admin_tests",
        {
            "type": "ValueError",
            "code": "handler_error",
            "message": "could not parse <invoice>",
            "retryable": False,
            "details": {"traceback": 'Traceback (most recent call last):\n  File "app/tasks.py", line 3, in run\n'
                        "    parse(doc)\nValueError: could not parse <invoice>\n"},
        },
        retryable=False,
    )
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "UPDATE cairnq_tasks SET run_at_ms = %s, lease_until_ms = %s, progress = %s, metadata = %s WHERE id = %s",
            [2**62, -(2**62), float("inf"), '{"n": ' + "7" * 5000 + "}", odd],
        )
    User.objects.create_superuser("operator", password="s3cret-pass")
    base = live_server.url
    page.goto(f"{base}/admin/login/?next=/admin/cairnq/task/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "s3cret-pass")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/cairnq/task/")
    assert page.locator("#result_list tbody tr").count() == 2
    assert page.locator(".cairnq-odd").count() == 1  # the odd row's progress (run at is on its page)
    shot(page, "hostile-changelist")

    page.goto(f"{base}/admin/cairnq/task/{odd}/change/")
    assert page.locator(".cairnq-undecodable").count() == 1
    assert page.locator('button[name="cancel"]').count() == 1
    shot(page, "hostile-detail")

    page.goto(f"{base}/admin/cairnq/task/{failed}/change/")
    assert "ValueError: could not parse <invoice>" in page.locator("#cairnq-traceback").inner_text()
    shot(page, "traceback-detail")
