"""An operator triages failures in Chromium: dashboard top errors -> the filtered list -> retry all matching.

A real worker subprocess fails the tasks (its error counts feed the triage)
and then advances the bulk retry the operator confirms; the progress page
refreshes itself until it says done. Screenshots in light and dark land in
``test-artifacts/``.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User

import cairnq_django as cq
from cairnq_django.models import BulkOperation, ErrorMinute, Task

from worker.conftest import ledger_dir, start_worker  # noqa: F401 - fixtures
from worker.conftest import wait_until
from . import make_task
from .test_browser import page, shot  # noqa: F401 - page is the fixture
from .test_browser_pause import card, log_in

pytestmark = pytest.mark.browser

FAILING = 24


def test_triage_to_a_confirmed_bulk_retry(page: Any, live_server: Any, store: Any, start_worker: Any) -> None:  # noqa: F811
    for i in range(FAILING):
        cq.submit("demo.crash", {"message": f"payment gateway timed out after 30 s\norder {i}"}, queue="payments",
                  max_attempts=1)
    for _ in range(3):
        cq.submit("demo.task_error", {}, queue="payments")
    for _ in range(5):
        cq.submit("demo.noop", {}, queue="payments")
    cq.submit("demo.crash", {"message": "KeyError: 'sku'"}, queue="catalog", max_attempts=2)
    User.objects.create_superuser("operator", password="s3cret-pass")
    worker = start_worker("--queue", "payments", "--queue", "catalog", overrides={"RETRY_BACKOFF_MS": 1})
    worker.wait_ready()
    wait_until(
        lambda: sum(row.failed for row in ErrorMinute.objects.filter(queue="payments")) == FAILING + 3
        and ErrorMinute.objects.filter(queue="catalog", failed=1).exists(),
        30,
        what="error counts flushed",
    )

    log_in(page, live_server.url, "operator", "s3cret-pass")
    payments = card(page, "payments")
    top = payments.locator(".cairnq-triage-item").first
    assert top.locator(".cairnq-triage-type").inner_text() == "RuntimeError"
    assert top.locator(".cairnq-triage-message").inner_text() == "payment gateway timed out after 30 s"
    assert f"{FAILING} failed" in top.locator(".cairnq-triage-counts").inner_text()
    assert payments.locator(".cairnq-triage-item").count() == 2
    shot(page, "triage-dashboard")

    top.locator(".cairnq-triage-link").click()
    page.wait_for_url("**/admin/cairnq/task/?*")
    assert page.locator("#result_list tbody tr").count() == FAILING
    shot(page, "triage-filtered-list")

    page.click("#cairnq-retry-all")
    page.wait_for_url("**/admin/cairnq/task/bulk/?*")
    assert f"{FAILING} tasks match this filter now" in page.locator("#cairnq-bulk-matched").inner_text()
    assert f"{FAILING} tasks will change" in page.locator("#cairnq-bulk-changing").inner_text()
    shot(page, "triage-bulk-confirm")

    page.click("button[name=confirm]")
    page.wait_for_url("**/admin/cairnq/task/bulk/*/")
    operation = BulkOperation.objects.get()
    assert (operation.action, operation.matched) == ("retry", FAILING)
    assert page.locator("#cairnq-live.cairnq-live-on").count() == 1
    page.evaluate("window.cairnqNoReload = 'still here'")
    # The worker's housekeeping takes it within its poll; the page follows without a reload.
    page.wait_for_function(
        "document.querySelector('#cairnq-bulk-state').innerText.trim() === 'Done'", timeout=30_000
    )
    assert page.evaluate("window.cairnqNoReload") == "still here"
    assert page.locator("#cairnq-bulk-changed").inner_text() == str(FAILING)
    assert page.locator("#cairnq-bulk-done").inner_text() == str(FAILING)
    assert page.locator("button", has_text="Stop this operation").count() == 0
    shot(page, "triage-bulk-done")
    assert LogEntry.objects.filter(user__username="operator", change_message="Re-queued (bulk).").count() == FAILING
    # Re-queued, the crashing tasks run (and fail) again: each counts one more attempt.
    wait_until(
        lambda: Task.objects.filter(queue="payments", name="demo.crash", attempt=2).count() == FAILING,
        30,
        what="retried tasks ran again",
    )

    page.emulate_media(color_scheme="dark")
    page.wait_for_timeout(500)  # the admin's links fade their colours over 0.15 s
    shot(page, "triage-bulk-done-dark")
    page.goto(f"{live_server.url}/admin/cairnq/task/dashboard/")
    page.wait_for_timeout(500)
    shot(page, "triage-dashboard-dark")


def test_the_progress_page_says_when_no_worker_runs(page: Any, live_server: Any, store: Any) -> None:  # noqa: F811
    for _ in range(3):
        make_task(store, "queued", queue="stuck")
    User.objects.create_superuser("operator", password="s3cret-pass")
    log_in(page, live_server.url, "operator", "s3cret-pass")
    page.goto(f"{live_server.url}/admin/cairnq/task/?queue=stuck&status=queued")
    page.click("#cairnq-cancel-all")
    assert "No worker is running right now" in page.locator("#content").inner_text()
    shot(page, "triage-bulk-cancel-confirm")
    page.click("button[name=confirm]")
    page.wait_for_url("**/admin/cairnq/task/bulk/*/")
    assert page.locator("#cairnq-bulk-no-worker").is_visible()
    assert page.locator("#cairnq-bulk-state").inner_text() == "Pending"
    shot(page, "triage-bulk-no-worker")
    page.click("button:has-text('Stop this operation')")
    page.wait_for_url("**/admin/cairnq/task/bulk/*/")
    assert page.locator("#cairnq-bulk-state").inner_text() == "Stopped"
    assert "stay changed" in page.locator("ul.messagelist").inner_text()
    assert Task.objects.filter(queue="stuck", status="queued").count() == 3
    page.emulate_media(color_scheme="dark")
    page.wait_for_timeout(500)
    shot(page, "triage-bulk-stopped-dark")
