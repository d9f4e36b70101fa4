"""An operator in Chromium finds a workflow, reads its graph, follows a node to its task and back, and cancels it.

Pins what the test client cannot see: the drawn graph shows every node as
a box inside its scrolling frame (the page itself never scrolls sideways),
a node's box is a link a click follows, the task's page leads back, an
ended run's outcomes are told apart by colour, the Cancel and Retry
buttons change the run, and a batch's "N of M ended" moves while its page
is open, with no reload, and stops being fetched once the batch has ended.
Screenshots land in ``var/screenshots/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

import cairnq_django as cq
from cairnq_django.store import get_store
from cairnq_django.workflows import advance

from .test_browser import message_text, page  # noqa: F401 - page is the fixture
from .test_browser_pause import log_in

pytestmark = pytest.mark.browser

SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
STEP = "demo.wf.step"


def shot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"workflow-{name}.png"), full_page=True)


def test_operator_reads_a_workflows_graph_and_cancels_it(page: Any, live_server: Any, store: Any) -> None:  # noqa: F811
    wf = cq.Workflow("onboard", key="onboard:42")
    fetch = wf.add("fetch", STEP)
    parse = wf.add("parse", STEP, after=[fetch])
    thumbs = wf.add("thumbs", STEP, after=[fetch], on_parent_failure="skip")
    wf.add("index", STEP, after=[parse, thumbs])
    wf.add("notify", STEP, after=["index"], on_parent_failure="run")
    run = wf.submit()
    other = cq.chain(cq.signature(STEP), cq.signature(STEP), cq.signature(STEP)).submit()
    User.objects.create_superuser("operator", password="s3cret-pass")
    base = live_server.url
    log_in(page, base, "operator", "s3cret-pass")

    page.goto(base + reverse("admin:cairnq_workflowrun_changelist"))
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 2
    assert run.id in rows.nth(1).inner_text() and other.id in rows.nth(0).inner_text()  # newest first
    assert "0 of 5 ended" in rows.nth(1).inner_text()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "list")

    page.goto(base + reverse("admin:cairnq_workflowrun_change", args=[run.id]))
    graph = page.locator(".cairnq-wf-graph svg")
    assert graph.locator(".cairnq-wf-node").count() == 5
    assert graph.locator("a.cairnq-wf-node").count() == 1  # only the released root has a task
    box = graph.locator('[data-node="notify"] rect').bounding_box()
    assert box is not None and box["width"] > 100 and box["height"] > 30  # drawn, not collapsed by CSS
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "page")
    page.emulate_media(color_scheme="dark")
    page.wait_for_timeout(500)  # the admin's links fade their colours over 0.15 s
    shot(page, "page-dark")
    page.emulate_media(color_scheme="light")

    # A node's box is a link to its task, whose page leads back here.
    graph.locator('a[data-node="fetch"]').click()
    page.wait_for_url("**/cairnq/task/*/change/")
    page.locator("#cairnq-workflow-link").click()
    page.wait_for_url(f"**/cairnq/workflowrun/{run.id}/change/")

    page.click('button[name="cancel"]')
    page.wait_for_selector("ul.messagelist")
    assert "1 workflow canceled (5 nodes)" in message_text(page)
    assert run.status == "canceled"
    assert page.locator(".field-status_cell .cairnq-badge").inner_text().lower() == "canceled"
    # The held nodes end at once; the root's task is canceled, its node ends on the repair pass.
    assert page.locator(".cairnq-wf-node--canceled").count() == 4
    shot(page, "after-cancel")


def test_an_ended_runs_graph_shows_each_outcome_and_retry_runs_it_again(
    page: Any, live_server: Any, store: Any  # noqa: F811
) -> None:
    wf = cq.Workflow("policies")
    bad = wf.add("bad", STEP, {"fail": True})
    wf.add("ok", STEP)
    wf.add("canceled", STEP, after=[bad])
    skipped = wf.add("skipped", STEP, after=[bad], on_parent_failure="skip")
    wf.add("ran", STEP, after=[bad], on_parent_failure="run")
    wf.add("after_skip", STEP, after=[skipped])
    run = wf.submit()
    for _ in range(10):  # burst workers until every node has ended, as tests/workflows does
        if run.done:
            break
        call_command("cairnq_worker", "--burst", "--task", STEP, "--concurrency", "2", verbosity=0)
        advance.sweep(get_store().alias)
    assert run.status == "failed"
    User.objects.create_superuser("operator", password="s3cret-pass")
    base = live_server.url
    log_in(page, base, "operator", "s3cret-pass")

    page.goto(base + reverse("admin:cairnq_workflowrun_change", args=[run.id]))
    graph = page.locator(".cairnq-wf-graph svg")
    for state, count in (("succeeded", 3), ("failed", 1), ("canceled", 1), ("skipped", 1)):
        assert graph.locator(f".cairnq-wf-node--{state}").count() == count, state
    # Failed, canceled and skipped boxes are painted in different colours.
    fills = {
        state: graph.locator(f".cairnq-wf-node--{state} rect").first.evaluate("r => getComputedStyle(r).fill")
        for state in ("succeeded", "failed", "canceled", "skipped")
    }
    assert len(set(fills.values())) == 4, fills
    assert page.locator('button[name="cancel"]').count() == 0
    shot(page, "ended")

    page.click('button[name="retry"]')
    page.wait_for_selector("ul.messagelist")
    assert "1 workflow retried (3 nodes)" in message_text(page)
    assert run.status == "running"
    assert graph.locator(".cairnq-wf-node--succeeded").count() == 3  # kept, not run again
    shot(page, "after-retry")


def test_a_1000_node_graph_loads_in_chromium(
    page: Any, live_server: Any, store: Any, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    # Ten layers of 100, each node after two of the layer before (as tests/admin/test_workflow_admin.py).
    wf = cq.Workflow("big")
    handles: list[Any] = []
    for index in range(1000):
        layer, place = divmod(index, 100)
        before = (layer - 1) * 100
        after = [] if layer == 0 else [handles[before + place], handles[before + (place + 7) % 100]]
        handles.append(wf.add(f"n{index:04d}", STEP, after=after))
    run = wf.submit()
    User.objects.create_superuser("operator", password="s3cret-pass")
    base = live_server.url
    log_in(page, base, "operator", "s3cret-pass")

    page.goto(base + reverse("admin:cairnq_workflowrun_change", args=[run.id]))
    graph = page.locator(".cairnq-wf-graph svg")
    assert graph.locator(".cairnq-wf-node").count() == 1000
    assert graph.locator(".cairnq-wf-edges path").count() == 1800
    # The graph scrolls inside its frame; the page itself does not scroll sideways.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    timing = page.evaluate(
        "(t => ({response: t.responseEnd - t.requestStart, loaded: t.loadEventEnd - t.startTime}))"
        "(performance.getEntriesByType('navigation')[0])"
    )
    with capsys.disabled():
        print(f"\n1,000-node page in Chromium: response {timing['response']:.0f} ms, load {timing['loaded']:.0f} ms")
    shot(page, "1000-nodes")


def test_a_batchs_count_moves_while_its_page_is_open(page: Any, live_server: Any, store: Any) -> None:  # noqa: F811
    batch = cq.Batch("mailing", on_finish=cq.signature(STEP, {"node": "report"}))
    with batch:
        # Two members on a queue of their own, so a worker can end those two first.
        for index in range(2):
            cq.submit(STEP, {"node": index}, queue="wf-early")
        for index in range(2, 4):
            cq.submit(STEP, {"node": index})
    User.objects.create_superuser("operator", password="s3cret-pass")
    base = live_server.url
    log_in(page, base, "operator", "s3cret-pass")

    page.goto(base + reverse("admin:cairnq_workflowrun_change", args=[batch.id]))
    live = page.locator("#cairnq-live")
    assert live.locator(".cairnq-wf-ended").inner_text() == "0 of 5 ended"
    page.wait_for_selector("#cairnq-live.cairnq-live-on")
    assert "updates every 2 s" in live.inner_text()  # the note shows only where the script runs
    page.evaluate("window.cairnqNoReload = 'still here'")

    # A real worker ends the two early members while the page is open.
    call_command("cairnq_worker", "--burst", "--queue", "wf-early", "--task", STEP, verbosity=0)
    page.wait_for_function(
        "document.querySelector('#cairnq-live .cairnq-wf-ended').innerText === '2 of 5 ended'", timeout=15_000
    )
    assert page.evaluate("window.cairnqNoReload") == "still here"
    shot(page, "batch-live")

    # The rest end, the callback with them: the count reaches the total, the status shows, polling stops.
    for _ in range(10):
        if batch.run.done:
            break
        call_command("cairnq_worker", "--burst", "--task", STEP, verbosity=0)
        advance.sweep(get_store().alias)
    assert batch.run.status == "succeeded"
    page.wait_for_selector("#cairnq-live [data-cairnq-final]", timeout=15_000)
    assert live.locator(".cairnq-wf-ended").inner_text() == "5 of 5 ended"
    assert live.locator(".cairnq-badge").inner_text().lower() == "succeeded"
    assert page.evaluate("window.cairnqNoReload") == "still here"
    shot(page, "batch-ended")
    assert live.locator("a.cairnq-wf-reload").get_attribute("href") == page.url.removeprefix(base)
    refreshed = live.get_attribute("data-cairnq-refreshed")
    page.wait_for_timeout(5_000)  # two and a half refresh intervals
    assert live.get_attribute("data-cairnq-refreshed") == refreshed
    # The link draws the whole page again: the outcome everywhere, nothing left to refresh.
    live.locator("a.cairnq-wf-reload").click()
    page.wait_for_selector(".field-status_cell .cairnq-badge--succeeded")
    assert page.locator("#cairnq-live").count() == 0 and page.locator('button[name="cancel"]').count() == 0
    assert page.locator(".cairnq-wf-node--succeeded").count() == 5
