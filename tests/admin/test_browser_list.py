"""An operator in Chromium: the task list fits a 1,400 px window with a
readable payload column, a bulk retry asks first, and the task's History says
who retried it.

Pins what the test client cannot measure: the rendered list's width with long
names, ids, queues, workers and errors present (no horizontal scroll at
1400x900, labels unbroken), the confirmation page's buttons, and the History
page Django's admin renders from the log entries the actions write.
Screenshots land in ``test-artifacts/``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User

from cairnq_django.models import Task
from cairnq_django.store import SubmitSpec

from . import WORKER, make_task, status_of
from .test_browser import message_text, page, shot  # noqa: F401 - page is the fixture

pytestmark = pytest.mark.browser

LONG_NAME = "billing.invoices.generate_monthly_statement_for_enterprise_customers_in_every_region"
LONG_QUEUE = "reports-eu-west-1-priority-overnight-batch"
LONG_WORD = "Unbreakable" + "x" * 120


def log_in(page: Any, base: str) -> None:  # noqa: F811
    User.objects.create_superuser("operator", password="s3cret-pass")
    page.goto(f"{base}/admin/login/?next=/admin/cairnq/task/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "s3cret-pass")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/cairnq/task/")


def long_rows(store: Any) -> dict[str, str]:
    """Tasks whose every shown value is long: a foreign writer's id, worker and error included."""
    running = store.submit(SubmitSpec(name=LONG_NAME, queue=LONG_QUEUE, payload_json=json.dumps({"doc": LONG_WORD})))
    worker = "worker-" + "host.example.internal-" * 4 + "pid-12345"
    store.claim([LONG_QUEUE], worker, lease_ms=300_000, names=[LONG_NAME])
    store.progress(running.id, worker, 0.42, "Rendering page 4,211 of 10,000 for " + LONG_WORD)
    failed = make_task(store, "running", name=LONG_NAME + ".failed", queue=LONG_QUEUE).id
    store.fail(
        failed,
        WORKER,
        {"type": "InvoiceRenderError", "code": "handler_error", "message": "could not render " + LONG_WORD,
         "retryable": False, "details": {}},
        retryable=False,
    )
    now = store.now_ms()
    foreign = "upstream-" + "0123456789abcdef" * 6
    Task.objects.create(
        id=foreign, name=LONG_NAME + ".upstream", queue=LONG_QUEUE, status="queued", payload={"k": LONG_WORD},
        metadata={}, attempt=0, max_attempts=3, priority=-2_000_000_000, run_at_ms=now, created_at_ms=now,
        updated_at_ms=now, correlation_id="corr-" + "9" * 80,
    )
    return {"running": running.id, "failed": failed, "foreign": foreign}


def test_list_fits_1400_px_with_long_values(page: Any, live_server: Any, store: Any) -> None:  # noqa: F811
    ids = long_rows(store)
    for state in ("queued", "succeeded", "canceled"):
        make_task(store, state)
    log_in(page, live_server.url)
    assert page.locator("#result_list tbody tr").count() == 6
    shot(page, "list-1400")
    assert_no_horizontal_scroll(page)
    assert page.evaluate(WRAPPED_LABELS) == []
    assert page.evaluate(EMPTY_CELLS) == []
    # Clipped values are whole in their titles (and in the page's text).
    row = page.locator("#result_list tbody tr").filter(has=page.locator(f'.cairnq-id[title="{ids["foreign"]}"]'))
    assert row.locator(".cairnq-name").get_attribute("title") == LONG_NAME + ".upstream"
    assert row.locator(".field-queue_cell .cairnq-clip").get_attribute("title") == LONG_QUEUE
    failed = page.locator(f'.cairnq-id[title="{ids["failed"]}"]').locator("xpath=..")
    assert failed.locator(".cairnq-list-error").get_attribute("title").startswith("InvoiceRenderError: could not")

    # Narrower (the sidebar's room) still fits: the clipped columns give way first.
    page.set_viewport_size({"width": 1280, "height": 800})
    assert_no_horizontal_scroll(page)
    # Filtered to a long queue, which lists it as a filter link too.
    page.goto(f"{live_server.url}/admin/cairnq/task/?queue={LONG_QUEUE}")
    page.set_viewport_size({"width": 1400, "height": 900})
    assert page.locator("#result_list tbody tr").count() == 3
    assert_no_horizontal_scroll(page)
    page.emulate_media(color_scheme="dark")
    shot(page, "list-1400-dark")


# Django's changelist scrolls its table inside ".results" rather than the
# page, so both are measured, and the table's right edge against the window.
WIDTHS = """() => {
  const doc = document.documentElement, results = document.querySelector('#changelist .results');
  return {page: [doc.scrollWidth, doc.clientWidth], results: [results.scrollWidth, results.clientWidth],
          table: document.querySelector('#result_list').getBoundingClientRect().right, window: window.innerWidth};
}"""


def assert_no_horizontal_scroll(page: Any) -> None:  # noqa: F811
    widths = page.evaluate(WIDTHS)
    assert widths["page"][0] <= widths["page"][1], widths
    assert widths["results"][0] <= widths["results"][1], widths
    assert widths["table"] <= widths["window"], widths


# Header labels and badges whose text takes more than one line (broken inside or between words):
# the distinct line tops of each one's text.
WRAPPED_LABELS = """() => [...document.querySelectorAll('#result_list thead th .text, #result_list .cairnq-badge')]
  .filter(el => {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT), tops = new Set();
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const range = document.createRange();
      range.selectNodeContents(node);
      for (const rect of range.getClientRects()) if (rect.width > 0) tops.add(Math.round(rect.top / 4));
    }
    return tops.size > 1;
  })
  .map(el => el.textContent.trim())"""
# Cells (other than the checkbox) whose rendered text is empty: an empty value must read "—".
EMPTY_CELLS = """() => [...document.querySelectorAll('#result_list tbody td, #result_list tbody th')]
  .filter(el => !el.classList.contains('action-checkbox') && el.innerText.trim() === '')
  .map(el => el.className)"""


def test_bulk_retry_confirms_and_history_shows_who(page: Any, live_server: Any, store: Any) -> None:  # noqa: F811
    failed = [make_task(store, "failed").id for _ in range(3)]
    succeeded = make_task(store, "succeeded").id
    log_in(page, live_server.url)
    base = live_server.url

    page.goto(f"{base}/admin/cairnq/task/?status=failed")
    page.check("#action-toggle")  # every row of the page
    page.select_option('select[name="action"]', "retry_tasks")
    page.click('button[name="index"]')
    page.wait_for_selector("#cairnq-confirm")
    # Nothing changed yet; the page says what will.
    assert all(status_of(task_id)[0] == "failed" for task_id in failed)
    assert "You selected 3 tasks:" in page.locator(".cairnq-confirm-question").inner_text()
    counts = page.locator("#cairnq-confirm-counts tbody tr")
    assert counts.count() == 1 and "re-queued, attempts kept" in counts.inner_text()
    assert page.locator("#cairnq-confirm-list li").count() == 3
    # The breadcrumbs use the markup of the running Django (a <div> on 5.2, an <ol> on 6), so they sit in their bar.
    crumbs = page.locator(".breadcrumbs")
    assert crumbs.locator("a").count() == 3
    assert crumbs.evaluate("el => getComputedStyle(el).backgroundColor") != "rgba(0, 0, 0, 0)"
    shot(page, "confirm-bulk-retry")

    # "No, take me back" is a plain link to the same filtered list, and acts on nothing.
    page.click(".cairnq-confirm-back")
    page.wait_for_url("**/admin/cairnq/task/?status=failed")
    assert all(status_of(task_id)[0] == "failed" for task_id in failed)

    page.check("#action-toggle")
    page.select_option('select[name="action"]', "retry_tasks")
    page.click('button[name="index"]')
    page.click('#cairnq-confirm button[name="confirm"]')
    page.wait_for_selector("ul.messagelist")
    assert "3 re-queued" in message_text(page)
    assert all(status_of(task_id)[0] == "queued" for task_id in failed)
    assert status_of(succeeded)[0] == "succeeded"
    shot(page, "after-bulk-retry")

    # The task's History: who, when, what.
    page.goto(f"{base}/admin/cairnq/task/{failed[0]}/change/")
    page.click("a.historylink")
    page.wait_for_url("**/history/")
    rows = page.locator("#change-history tbody tr")
    assert rows.count() == 1
    assert "operator" in rows.inner_text() and "Re-queued." in rows.inner_text()
    shot(page, "history-after-retry")


def test_failed_task_page_opens_with_the_error(page: Any, live_server: Any, store: Any) -> None:  # noqa: F811
    ids = long_rows(store)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/cairnq/task/{ids['failed']}/change/")
    summary = page.locator("#cairnq-error-summary").bounding_box()
    payload = page.locator(".field-payload_pretty").bounding_box()
    error = page.locator(".field-error_pretty").bounding_box()
    assert summary["y"] < error["y"] < payload["y"]
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    shot(page, "failed-detail")


# Each payload preview: its text, whether all of it shows (nothing clipped either way), and its height.
PREVIEWS = """() => Object.fromEntries([...document.querySelectorAll('#result_list code.cairnq-preview')].map(el => [
  el.closest('tr').querySelector('.cairnq-id').title,
  {text: el.textContent, title: el.title, whole: el.scrollWidth <= el.clientWidth && el.scrollHeight <= el.clientHeight,
   height: el.getBoundingClientRect().height,
   lineHeight: parseFloat(getComputedStyle(el).lineHeight)}]))"""


def test_payload_column_shows_sixty_characters(page: Any, live_server: Any, store: Any) -> None:  # noqa: F811
    """At 1,400 px the payload column shows its whole 60-character preview; a huge payload stays as short."""
    words = {"to": "alice@example.com", "subject": "Your invoice for March is ready", "lines": [1, 2, 3]}
    readable = store.submit(SubmitSpec(name="mail.send", queue="emails", payload_json=json.dumps(words))).id
    # One unbreakable word, far past what the list reads of a payload.
    huge_json = json.dumps({"doc": LONG_WORD * 40})
    huge = store.submit(SubmitSpec(name="report.build", queue="reports", payload_json=huge_json)).id
    log_in(page, live_server.url)
    shown = page.evaluate(PREVIEWS)
    compact = json.dumps(words, sort_keys=True, ensure_ascii=False)
    assert shown[readable]["text"] == compact[:59] + "…" and shown[readable]["title"] == compact
    assert shown[readable]["whole"], shown[readable]
    assert shown[huge]["text"].startswith('{"doc": "Unbreakable') and len(shown[huge]["text"]) == 60
    assert shown[huge]["whole"], shown[huge]
    for preview in shown.values():
        # At most four lines, however long the payload.
        assert preview["height"] <= 4 * preview["lineHeight"] + 1, preview
    assert_no_horizontal_scroll(page)
    shot(page, "list-payload-column")
