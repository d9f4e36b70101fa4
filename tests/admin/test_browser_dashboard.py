"""The dashboard refreshes itself in Chromium while a real worker runs, reads without JavaScript,
and is the entry the sidebar highlights.

A worker subprocess finishes a task submitted while the page is open; the
page's counts and chart change without a reload (a marker set on ``window``
survives). Screenshots in light and dark land in ``test-artifacts/``.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

import cairnq_django as cq
from cairnq_django.models import Task

from worker.conftest import ledger_dir, start_worker  # noqa: F401 - fixtures
from worker.conftest import wait_until
from . import make_task
from .test_browser import CHROMIUM, CHROMIUM_ARGS, page, shot  # noqa: F401 - page is the fixture
from .test_browser_pause import card, log_in

pytestmark = pytest.mark.browser


def test_the_dashboard_updates_without_a_reload(
    page: Any, live_server: Any, store: Any, start_worker: Any  # noqa: F811
) -> None:
    make_task(store, "succeeded", queue="live")
    make_task(store, "failed", queue="live")
    make_task(store, "queued", queue="backlog")
    User.objects.create_superuser("operator", password="s3cret-pass")
    worker = start_worker("--queue", "live")
    worker.wait_ready()
    log_in(page, live_server.url, "operator", "s3cret-pass")
    live = card(page, "live")
    succeeded = live.locator(".cairnq-count--succeeded .cairnq-count-value")
    assert succeeded.inner_text() == "1"
    assert "0 succeeded" in live.locator("figcaption").inner_text()
    assert page.locator("#cairnq-live.cairnq-live-on").count() == 1
    page.evaluate("window.cairnqNoReload = 'still here'")
    shot(page, "dashboard-live-before")

    cq.submit("demo.noop", {}, queue="live")
    wait_until(lambda: Task.objects.filter(queue="live", status="succeeded").count() == 2, 20, what="task finished")
    # The status count first (the next refresh), then the chart once the worker has flushed its minute.
    page.wait_for_function(
        "document.querySelector('#cairnq-live').innerText.includes('1 succeeded')", timeout=30_000
    )
    assert succeeded.inner_text() == "2"
    assert page.evaluate("window.cairnqNoReload") == "still here"
    assert live.locator("svg.cairnq-chart rect.cairnq-chart-ok").count() == 1
    assert "p50 ≤ " in live.locator(".cairnq-pickup").inner_text()
    shot(page, "dashboard-live-after")

    page.emulate_media(color_scheme="dark")
    page.wait_for_timeout(500)  # the admin's links fade their colours over 0.15 s
    shot(page, "dashboard-live-dark")
    # Labels stay whole: no count label is wider than its box or split over lines.
    heights = page.eval_on_selector_all(
        ".cairnq-count-label", "els => els.map(e => [e.textContent, e.getClientRects().length, e.scrollWidth <= e.clientWidth + 1])"
    )
    assert heights and all(lines == 1 and fits for _text, lines, fits in heights), heights


def test_the_dashboard_reads_without_javascript(live_server: Any, store: Any, cairnq_db: Any, monkeypatch: Any) -> None:
    from pathlib import Path

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    make_task(store, "succeeded", queue="plain")
    User.objects.create_superuser("operator", password="s3cret-pass")
    from django.db import connections

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900}, java_script_enabled=False)
            plain = context.new_page()
            log_in(plain, live_server.url, "operator", "s3cret-pass")
            assert card(plain, "plain").locator(".cairnq-count--succeeded .cairnq-count-value").inner_text() == "1"
            assert card(plain, "plain").locator("svg.cairnq-chart").count() == 1
            assert "Reload the page" in plain.locator("#content-main").inner_text()
            assert plain.locator(".cairnq-live-note").is_hidden()
            shot(plain, "dashboard-no-javascript")
        finally:
            browser.close()
            connections.close_all()


def test_the_sidebar_marks_the_dashboard(page: Any, live_server: Any, store: Any) -> None:  # noqa: F811
    """On the dashboard the sidebar highlights "Queue dashboard", not "Tasks" (whose URLs it is under)."""
    make_task(store, "queued", queue="emails")
    User.objects.create_superuser("operator", password="s3cret-pass")
    log_in(page, live_server.url, "operator", "s3cret-pass")
    sidebar = page.locator("#nav-sidebar")
    current = sidebar.locator("tr.current-model")
    assert current.count() == 1 and current.inner_text().strip() == "Queue dashboard"
    assert sidebar.locator('a[aria-current="page"]').inner_text() == "Queue dashboard"
    # Highlighted on screen: its row is coloured, the Tasks row is not.
    background = "el => getComputedStyle(el).backgroundColor"
    tasks_row = sidebar.locator("tr.model-task")
    assert current.evaluate(background) != tasks_row.evaluate(background)
    shot(page, "dashboard-sidebar")
