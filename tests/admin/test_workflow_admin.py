"""The workflows admin: the list, its filters and search, a run's page with its graph, cancel and retry.

Pins: a run missing from the list or listed out of order; a filter or search
that matches the wrong runs; a page that leaves a node out of the graph, or
does not link a node's box to its task; cancel or retry offered to (or a
forged POST honoured for) a staff user without ``change_workflow_state``;
an action that changes a run without an admin log entry or a message; a
task page that does not lead back to its workflow; a 1,000-node page
that fails, or reads the database once per node; a running run's page
without its live count, or that count's view answering a user who may not
see the page, or telling a count that is not the run's; an open batch read
as "-1 ended"; and a list past the count cap that states the cap as its
size.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import cairnq_django as cq
from cairnq_django.models import Task
from cairnq_django.store import get_store
from cairnq_django.workflows import advance
from cairnq_django.workflows.models import RunStatus, WorkflowRun

from . import make_task

pytestmark = pytest.mark.django_db(transaction=True)

STEP = "demo.wf.step"
CHANGELIST = "admin:cairnq_workflowrun_changelist"


def page_of(run: Any) -> str:
    return reverse("admin:cairnq_workflowrun_change", args=[run.id])


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def workflow_staff(username: str, *codenames: str) -> User:
    """A staff user (password ``pw``) holding only the named workflow permissions."""
    user = User.objects.create_user(username, password="pw", is_staff=True)
    content_type = ContentType.objects.get_for_model(WorkflowRun)
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(content_type=content_type, codename=codename))
    return User.objects.get(pk=user.pk)  # drop the cached permission set


@pytest.fixture
def root(cairnq_db: Any) -> Client:
    return client_for(User.objects.create_superuser("root", password="pw"))


def diamond(name: str = "onboard", key: str | None = None) -> Any:
    wf = cq.Workflow(name, key=key)
    fetch = wf.add("fetch", STEP)
    parse = wf.add("parse", STEP, after=[fetch])
    thumbs = wf.add("thumbs", STEP, after=[fetch], on_parent_failure="skip")
    wf.add("index", STEP, after=[parse, thumbs])
    return wf.submit()


def ended_by_cancel(run: Any) -> Any:
    """Cancel ``run`` and let the repair pass end its canceled tasks' nodes: a run that can be retried."""
    cq.cancel_workflow(run.id)
    advance.sweep(get_store().alias)
    assert run.done and run.status == "canceled"
    return run


def listed_ids(response: Any) -> list[str]:
    return re.findall(r'<th class="field-id_cell"><a href="[^"]*"><span class="cairnq-id" title="([^"]*)"',
                      response.content.decode())


def drawing(html: str) -> str:
    """The graph's ``<svg>`` (the admin's page holds its own icons' SVG too)."""
    start = html.index('<svg class="cairnq-wf-svg"')
    return html[start:html.index("</svg>", start)]


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def run_until_done(run: Any) -> None:
    """Burst workers and the repair pass until every node of ``run`` has ended (as tests/workflows does)."""
    for _ in range(10):
        if run.done:
            return
        call_command("cairnq_worker", "--burst", "--task", STEP, "--concurrency", "2", verbosity=0)
        advance.sweep(get_store().alias)
    raise AssertionError(f"{run} did not end: {run.nodes()}")


def test_the_list_shows_runs_newest_first_with_status_kind_and_nodes_ended(root: Client) -> None:
    first = diamond("first")
    chain = cq.chain(cq.signature(STEP), cq.signature(STEP)).submit()
    ended = ended_by_cancel(cq.group([cq.signature(STEP)] * 3).submit())

    response = root.get(reverse(CHANGELIST))

    assert response.status_code == 200
    assert listed_ids(response) == [ended.id, chain.id, first.id]
    html = response.content.decode()
    assert "0 of 4 ended" in html and "0 of 2 ended" in html and "3 of 3 ended" in html
    assert html.count('class="cairnq-badge cairnq-badge--running"') == 2
    assert html.count('class="cairnq-badge cairnq-badge--canceled"') == 1
    assert '<td class="field-kind">chain</td>' in html and '<td class="field-kind">group</td>' in html
    # Read-only: no "add" link, and no delete among the actions.
    assert "cairnq/workflowrun/add/" not in html and 'value="delete_selected"' not in html


def test_filters_by_status_kind_and_name_and_search_by_exact_id_or_key(root: Client) -> None:
    keyed = diamond("onboard", key="onboard:42")
    other = diamond("offboard")
    chain = cq.chain(cq.signature(STEP), cq.signature(STEP)).submit()
    canceled = ended_by_cancel(cq.group([cq.signature(STEP)]).submit())

    def found(**query: str) -> set[str]:
        response = root.get(reverse(CHANGELIST), query)
        assert response.status_code == 200
        return set(listed_ids(response))

    assert found(status__exact="canceled") == {canceled.id}
    assert found(status__exact="running") == {keyed.id, other.id, chain.id}
    assert found(kind="chain") == {chain.id}
    assert found(kind="workflow") == {keyed.id, other.id}
    assert found(name="offboard") == {other.id}
    assert found(name="board") == set()  # exact, not a part
    assert found(q="onboard:42") == {keyed.id}
    assert found(q=chain.id) == {chain.id}
    assert found(q=chain.id[:-2]) == set()
    # Django's search form refuses a NUL (no search at all); the page must still answer on both dialects.
    found(q="bad\x00id")


def test_a_runs_page_draws_every_node_and_links_those_with_a_task(root: Client) -> None:
    run = diamond()
    response = root.get(page_of(run))
    assert response.status_code == 200
    html = response.content.decode()
    svg = drawing(html)
    assert sorted(re.findall(r'data-node="([^"]+)"', svg)) == ["fetch", "index", "parse", "thumbs"]
    assert svg.count("<path ") == 4  # the diamond's four edges
    # The released root is a link to its task; held nodes have no task yet.
    fetch_task = run.nodes()["fetch"].task_id
    task_url = reverse("admin:cairnq_task_change", args=[fetch_task])
    assert re.search(rf'<a class="cairnq-wf-node cairnq-wf-node--released" href="{re.escape(task_url)}" '
                     r'data-node="fetch">', svg)
    assert svg.count('class="cairnq-wf-node cairnq-wf-node--held"') == 3
    assert "1 Released" in html and "3 Held" in html
    assert "0 of 4 ended" in html


def test_a_nodes_name_is_escaped_in_the_drawing(root: Client) -> None:
    wf = cq.Workflow("hostile")
    wf.add('<script>alert("x")</script>', STEP)
    run = wf.submit()
    html = root.get(page_of(run)).content.decode()
    assert "<script>alert" not in html
    assert 'data-node="&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"' in html


def test_a_1000_node_run_renders_in_a_bounded_number_of_queries(
    root: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    # Ten layers of 100, each node after two of the layer before: 1,000 nodes, 1,800 edges.
    wf = cq.Workflow("big")
    handles: list[Any] = []
    for index in range(1000):
        layer, place = divmod(index, 100)
        before = (layer - 1) * 100
        after = [] if layer == 0 else [handles[before + place], handles[before + (place + 7) % 100]]
        handles.append(wf.add(f"n{index:04d}", STEP, after=after))
    run = wf.submit()
    url = page_of(run)
    root.get(url)  # warm: the first request pays for templates and URL resolvers

    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = root.get(url)
        elapsed = time.perf_counter() - started

    assert response.status_code == 200
    html = response.content.decode()
    svg = drawing(html)
    assert svg.count("data-node=") == 1000 and svg.count("<path ") == 1800
    assert html.count('class="cairnq-wf-node cairnq-wf-node--released"') == 100
    assert len(queries) < 20, [query["sql"] for query in queries]
    with capsys.disabled():
        print(f"\n1,000-node workflow page: {elapsed * 1000:.0f} ms, {len(html):,} bytes, {len(queries)} queries")


def test_cancel_and_retry_need_the_permission(store: Any, cairnq_db: Any) -> None:
    run = diamond()
    viewer = client_for(workflow_staff("viewer", "view_workflowrun"))
    html = viewer.get(reverse(CHANGELIST)).content.decode()
    assert set(re.findall(r'<option value="([a-z_]+)"', html)) == set()
    page = viewer.get(page_of(run)).content.decode()
    assert 'name="cancel"' not in page and 'name="retry"' not in page
    # A forged POST changes nothing: the buttons' URLs and the list's action.
    assert viewer.post(reverse("admin:cairnq_workflowrun_cancel", args=[run.id])).status_code == 403
    viewer.post(reverse(CHANGELIST), {"action": "cancel_workflows", "_selected_action": [run.id], "index": "0"})
    assert run.status == "running"
    ended_by_cancel(run)
    assert viewer.post(reverse("admin:cairnq_workflowrun_retry", args=[run.id])).status_code == 403
    assert run.status == "canceled"
    # The permission without the view permission does not open the page's buttons either.
    blind = client_for(workflow_staff("blind", "change_workflow_state"))
    assert blind.post(reverse("admin:cairnq_workflowrun_retry", args=[run.id])).status_code == 403
    assert run.status == "canceled" and not LogEntry.objects.exists()


def test_cancel_button_cancels_the_run_logs_it_and_says_so(cairnq_db: Any) -> None:
    run = diamond()
    operator_user = workflow_staff("operator", "view_workflowrun", "change_workflow_state")
    operator = client_for(operator_user)
    page = operator.get(page_of(run)).content.decode()
    assert 'name="cancel"' in page and 'name="retry"' not in page  # retry only once the run has ended
    assert operator.get(reverse("admin:cairnq_workflowrun_cancel", args=[run.id])).status_code == 405

    response = operator.post(reverse("admin:cairnq_workflowrun_cancel", args=[run.id]), follow=True)

    assert messages_of(response) == ["1 workflow canceled (4 nodes)"]
    assert response.redirect_chain[-1][0] == page_of(run)
    assert run.status == "canceled"
    [entry] = LogEntry.objects.all()
    assert entry.user_id == operator_user.pk and entry.object_id == run.id
    assert entry.content_type == ContentType.objects.get_for_model(WorkflowRun)
    assert "Canceled the workflow (4 nodes)" in entry.get_change_message()
    # A second cancel finds nothing running: a warning, and nothing logged.
    again = operator.post(reverse("admin:cairnq_workflowrun_cancel", args=[run.id]), follow=True)
    [message] = list(again.context["messages"])
    assert str(message) == "0 workflows canceled (0 nodes), 1 skipped: not running" and message.level_tag == "warning"
    assert LogEntry.objects.count() == 1


def test_retry_action_reruns_ended_runs_and_skips_running_ones(cairnq_db: Any) -> None:
    ended = ended_by_cancel(diamond("ended"))
    running = diamond("running")
    operator = client_for(workflow_staff("operator", "view_workflowrun", "change_workflow_state"))
    page = operator.get(page_of(ended)).content.decode()
    assert 'name="retry"' in page and 'name="cancel"' not in page

    response = operator.post(
        reverse(CHANGELIST),
        {"action": "retry_workflows", "_selected_action": [ended.id, running.id], "index": "0"},
        follow=True,
    )

    assert messages_of(response) == ["1 workflow retried (4 nodes), 1 skipped: still running or nothing failed"]
    assert ended.status == "running" and ended.nodes()["fetch"].state == "released"
    [entry] = LogEntry.objects.all()
    assert entry.object_id == ended.id and "Retried the workflow (4 nodes)" in entry.get_change_message()


def test_cancel_action_over_a_selection(cairnq_db: Any) -> None:
    one, two = diamond("one"), cq.chain(cq.signature(STEP), cq.signature(STEP)).submit()
    operator = client_for(workflow_staff("operator", "view_workflowrun", "change_workflow_state"))
    html = operator.get(reverse(CHANGELIST)).content.decode()
    assert set(re.findall(r'<option value="([a-z_]+)"', html)) == {"cancel_workflows", "retry_workflows"}
    response = operator.post(
        reverse(CHANGELIST), {"action": "cancel_workflows", "_selected_action": [one.id, two.id], "index": "0"},
        follow=True,
    )
    assert messages_of(response) == ["2 workflows canceled (6 nodes)"]
    assert one.status == two.status == "canceled"
    assert sorted(LogEntry.objects.values_list("object_id", flat=True)) == sorted([one.id, two.id])


def test_a_node_tasks_page_links_to_its_workflow(root: Client, store: Any) -> None:
    run = diamond("linked")
    task_id = run.nodes()["fetch"].task_id
    html = root.get(reverse("admin:cairnq_task_change", args=[task_id])).content.decode()
    link = re.search(r'<a href="([^"]+)" id="cairnq-workflow-link">linked</a> \(([^,]+), node fetch\)', html)
    assert link is not None and link.group(1) == page_of(run) and link.group(2) == run.id
    # A task of no workflow: no link.
    plain = make_task(store).id
    assert "cairnq-workflow-link" not in root.get(reverse("admin:cairnq_task_change", args=[plain])).content.decode()
    # A run purged since: its id, no link.
    WorkflowRun.objects.filter(pk=run.id).delete()
    html = root.get(reverse("admin:cairnq_task_change", args=[task_id])).content.decode()
    assert "cairnq-workflow-link" not in html and f"{run.id} (no longer stored)" in html
    assert Task.objects.filter(pk=task_id).exists()


def test_a_running_batchs_count_is_live_and_its_view_follows_the_members(cairnq_db: Any) -> None:
    batch = cq.Batch(on_finish=cq.signature(STEP))
    with batch:
        members = [cq.submit(STEP, {"node": index}) for index in range(3)]
    url = reverse("admin:cairnq_workflowrun_progress", args=[batch.id])
    viewer = client_for(workflow_staff("viewer", "view_workflowrun"))

    # The page holds the region the dashboard's script refreshes, and loads the script.
    page = viewer.get(page_of(batch)).content.decode()
    assert (
        f'<span id="cairnq-live" data-cairnq-refresh-ms="2000" data-cairnq-fragment-url="{url}" '
        'data-cairnq-fragment="workflow-progress"><span class="cairnq-wf-ended">0 of 4 ended</span>'
    ) in page
    assert "cairnq/dashboard.js" in page

    def fragment() -> str:
        response = viewer.get(url)
        assert response.status_code == 200 and response["X-Cairnq-Fragment"] == "workflow-progress"
        return response.content.decode()

    first = fragment()
    assert first.startswith('<span class="cairnq-wf-ended">0 of 4 ended</span>') and "data-cairnq-final" not in first
    # Two members end (an operator cancels them; the repair pass counts them down): the view says so.
    for member in members[:2]:
        cq.cancel(member.id)
    advance.sweep(get_store().alias)
    assert fragment().startswith('<span class="cairnq-wf-ended">2 of 4 ended</span>')

    run_until_done(batch.run)
    status = batch.run.status
    # The end: the status beside the count, the mark that stops the script, a way back to the whole page.
    assert fragment() == (
        '<span class="cairnq-wf-ended" data-cairnq-final>4 of 4 ended</span> '
        f'<span class="cairnq-badge cairnq-badge--{status}">{RunStatus(status).label}</span> '
        f'<a href="{page_of(batch)}" class="cairnq-wf-reload">Reload the page</a>'
    )
    # An ended run's page is plain: no region, no script.
    page = viewer.get(page_of(batch)).content.decode()
    assert 'id="cairnq-live"' not in page and "cairnq/dashboard.js" not in page and "4 of 4 ended" in page


def test_the_live_count_answers_only_who_may_open_the_page(cairnq_db: Any) -> None:
    run = diamond()
    url = reverse("admin:cairnq_workflowrun_progress", args=[run.id])
    anonymous = Client().get(url)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    # change_workflow_state without view_workflowrun: the page is refused, and so is its count.
    blind = client_for(workflow_staff("blind", "change_workflow_state"))
    assert blind.get(page_of(run)).status_code == 403
    assert blind.get(url).status_code == 403
    assert blind.get(reverse("admin:cairnq_workflowrun_progress", args=["wf_missing"])).status_code == 403
    viewer = client_for(workflow_staff("viewer", "view_workflowrun"))
    assert viewer.get(url).status_code == 200
    assert viewer.get(reverse("admin:cairnq_workflowrun_progress", args=["wf_missing"])).status_code == 404
    # An id no row can hold (PostgreSQL would refuse the query) is "no such run" too.
    assert viewer.get(reverse("admin:cairnq_workflowrun_progress", args=["bad\x00id"])).status_code == 404


def test_an_open_batch_with_nothing_ended_reads_zero_ended(root: Client) -> None:
    # While open, nodes_left counts the close too: 0 nodes, 1 left.
    with cq.Batch() as batch:
        assert "0 of 0 ended" in root.get(page_of(batch)).content.decode()
        listed = root.get(reverse(CHANGELIST)).content.decode()
        assert "0 of 0 ended" in listed and "-1 of" not in listed


def test_a_list_past_the_count_cap_does_not_state_the_cap_as_its_size(root: Client) -> None:
    # 10,001 runs, one statement: one more than the paginator counts (EstimatedCountPaginator).
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO cairnq_django_workflow (id, name, kind, status, nodes_total, nodes_left, nodes_failed,
                                                created_at_ms)
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10001)
            SELECT 'wf_cap' || (100000 + i), 'capped', 'group', 'succeeded', 1, 0, 0, 1000 + i FROM n
            """
        )
    html = root.get(reverse(CHANGELIST)).content.decode()
    paginator = html[html.index('<p class="paginator">'):]
    paginator = paginator[:paginator.index("</p>")]
    # "more than 10000", or on PostgreSQL "about N" once the planner has counted the table.
    assert re.search(r"(more than 10000|about \d+)\s+workflows", paginator), paginator
    narrowed = root.get(reverse(CHANGELIST), {"name": "capped"}).content.decode()
    assert re.search(r"more than 10000\s+workflows", narrowed)
