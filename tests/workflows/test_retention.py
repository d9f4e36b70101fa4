"""Retention of workflow rows (docs/workflows.md, "Retention"): a finished run
goes, with its nodes and edges, once none of its nodes' task rows is left;
a running run stays whatever was purged; the worker's sweep and
``cairnq_purge`` both do it, in pages. On both dialects.

Nodes are run as another SDK's worker would (the store's claim and complete),
and the repair pass moves the runs on, so each test sets up its runs in a few
statements.
"""

from __future__ import annotations

import io
from typing import Any

from django.core.management import call_command
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

import cairnq_django as cq
from cairnq_django.client.retention import PurgeRule, sweep
from cairnq_django.models import Task
from cairnq_django.store import get_store
from cairnq_django.workflows import advance
from cairnq_django.workflows.models import WorkflowEdge, WorkflowNode, WorkflowRun
from cairnq_django.workflows.retention import forget_finished_runs

STEP = "demo.wf.step"
DAY_MS = 86_400_000
WORKER = "worker_other_sdk"


def chain(length: int = 2, queue: str = "default") -> Any:
    return cq.chain(*(cq.signature(STEP, {"n": i}, queue=queue) for i in range(length))).submit()


def finish_all(queue: str = "default") -> None:
    """Complete every claimable task of ``queue`` and advance the runs, until none is left."""
    store = get_store()
    while True:
        claimed = store.claim([queue], WORKER, lease_ms=30_000, limit=100)
        for row in claimed:
            store.complete(row.id, WORKER, '{"ok": true}')
        advanced = advance.sweep(store.alias)
        if not claimed and not advanced:
            return


def purge_tasks_of(run: Any) -> None:
    """Delete the run's task rows, as a purge of them would."""
    Task.objects.filter(correlation_id=run.id).delete()


def rows_of(run: Any) -> tuple[int, int, int]:
    return (
        WorkflowRun.objects.filter(id=run.id).count(),
        WorkflowNode.objects.filter(run_id=run.id).count(),
        WorkflowEdge.objects.filter(run_id=run.id).count(),
    )


def test_a_finished_run_whose_task_rows_are_all_purged_goes_with_its_nodes_and_edges(cairnq_db: Any) -> None:
    gone, kept = chain(3), chain(3)
    finish_all()
    assert gone.status == kept.status == "succeeded"
    purge_tasks_of(gone)
    assert forget_finished_runs(get_store().alias) == 1
    assert rows_of(gone) == (0, 0, 0)
    # The other run's task rows are there: its results are still readable, so it stays whole.
    assert rows_of(kept) == (1, 3, 2)
    assert set(kept.results()) == {STEP, f"{STEP}-2", f"{STEP}-3"}
    assert forget_finished_runs(get_store().alias) == 0


def test_a_finished_run_keeps_its_rows_while_one_task_row_is_left(cairnq_db: Any) -> None:
    run = chain(3)
    finish_all()
    first = run.nodes()[STEP].task_id
    Task.objects.filter(correlation_id=run.id).exclude(id=first).delete()
    assert forget_finished_runs(get_store().alias) == 0
    assert rows_of(run) == (1, 3, 2)
    Task.objects.filter(id=first).delete()
    assert forget_finished_runs(get_store().alias) == 1
    assert rows_of(run) == (0, 0, 0)


def test_a_running_run_stays_even_when_its_ended_nodes_task_rows_are_purged(cairnq_db: Any) -> None:
    run = chain(3)
    store = get_store()
    [first] = store.claim(["default"], WORKER, lease_ms=30_000)
    store.complete(first.id, WORKER, '{"ok": true}')
    advance.sweep(store.alias)
    assert {n.name: n.state for n in run.nodes().values()} == {
        STEP: "succeeded", f"{STEP}-2": "released", f"{STEP}-3": "held"
    }
    Task.objects.filter(id=first.id).delete()
    assert forget_finished_runs(store.alias) == 0
    assert rows_of(run) == (1, 3, 2) and run.status == "running"
    # The purged node had recorded its outcome: the run goes on and ends as usual.
    assert run.nodes()[STEP].state == "succeeded"
    finish_all()
    assert run.status == "succeeded"
    assert forget_finished_runs(store.alias) == 0  # two of its task rows are left


def test_a_canceled_run_stays_until_its_last_node_has_ended_then_goes(cairnq_db: Any) -> None:
    # cancel_workflow marks the run canceled at once; its released node ends
    # when the repair pass sees its task's end: until then the run is not finished.
    run = chain(2)
    cq.cancel_workflow(run.id)
    assert run.status == "canceled" and not run.done
    purge_tasks_of(run)
    # A finished run submitted after it, so the page that deletes that one spans the canceled run too;
    # ended by its own settlement's advance, as our worker would, not by the repair pass.
    after = chain(1)
    store = get_store()
    alias = store.alias
    [row] = store.claim(["default"], WORKER, lease_ms=30_000)
    store.complete(row.id, WORKER, "null")
    advance.tasks_ended(alias, [(row.id, "succeeded")])
    assert after.status == "succeeded"
    purge_tasks_of(after)
    assert forget_finished_runs(alias) == 1
    assert rows_of(after) == (0, 0, 0) and rows_of(run) == (1, 2, 1)
    # The repair pass ends the node whose row is gone; the run ended after its last row went.
    advance.sweep(alias)
    assert run.done
    assert forget_finished_runs(alias) == 1 and rows_of(run) == (0, 0, 0)


def test_the_retention_sweep_removes_the_runs_whose_tasks_its_rules_purged(cairnq_db: Any) -> None:
    store = get_store()
    succeeded, canceled = chain(2), chain(1)
    cq.cancel(Task.objects.get(correlation_id=canceled.id).id)
    finish_all()
    assert (succeeded.status, canceled.status) == ("succeeded", "failed")
    Task.objects.update(completed_at_ms=F("completed_at_ms") - 8 * DAY_MS)
    # A rule for succeeded tasks only: the canceled node's row stays, and so does its run.
    assert sweep(store, rules=[PurgeRule(7 * DAY_MS, status="succeeded")]) == 2
    assert rows_of(succeeded) == (0, 0, 0)
    assert rows_of(canceled) == (1, 1, 0)
    assert sweep(store, rules=[PurgeRule(7 * DAY_MS)]) == 1
    assert rows_of(canceled) == (0, 0, 0)


def test_a_sweep_with_no_rules_touches_no_run(cairnq_db: Any) -> None:
    run = chain(1)
    finish_all()
    purge_tasks_of(run)
    with CaptureQueriesContext(connection) as queries:
        assert sweep(get_store(), rules=[]) == 0
    assert not queries.captured_queries and rows_of(run) == (1, 1, 0)


def test_cairnq_purge_removes_the_runs_whose_tasks_it_purged(cairnq_db: Any) -> None:
    old, recent = chain(2), chain(2)
    finish_all()
    Task.objects.filter(correlation_id=old.id).update(completed_at_ms=F("completed_at_ms") - 8 * DAY_MS)
    out = io.StringIO()
    call_command("cairnq_purge", "--older-than", "7d", stdout=out)
    assert "removed 1 finished workflow run(s)" in out.getvalue()
    assert "purged 2 task(s)" in out.getvalue()
    assert rows_of(old) == (0, 0, 0)
    assert rows_of(recent) == (1, 2, 1) and recent.status == "succeeded"
    # A dry run deletes nothing, workflow rows included.
    purge_tasks_of(recent)
    call_command("cairnq_purge", "--older-than", "7d", "--dry-run", stdout=io.StringIO())
    assert rows_of(recent) == (1, 2, 1)


def test_many_runs_go_in_pages_each_a_bounded_transaction(cairnq_db: Any) -> None:
    runs = [chain(2) for _ in range(11)]
    still = chain(2, queue="elsewhere")  # no worker serves its queue: it runs on
    finish_all()
    store = get_store()
    Task.objects.all().delete()
    with CaptureQueriesContext(connection) as queries:
        assert forget_finished_runs(store.alias, limit=4) == 11
    run_deletes = [q for q in queries.captured_queries if q["sql"].lstrip().startswith("DELETE FROM cairnq_django_workflow\n")]
    # 11 finished runs, pages of 4: three pages, each deleting its runs in one statement.
    assert len(run_deletes) == 3
    assert all(rows_of(run) == (0, 0, 0) for run in runs)
    assert rows_of(still) == (1, 2, 1)
    assert WorkflowNode.objects.count() == 2 and WorkflowEdge.objects.count() == 1


def test_a_walk_stops_between_pages_when_asked_and_rests_in_proportion(cairnq_db: Any) -> None:
    for _ in range(5):
        chain(1)
    finish_all()
    Task.objects.all().delete()
    rests: list[float] = []
    alias = get_store().alias
    assert forget_finished_runs(alias, limit=2, should_stop=lambda: True) == 2
    assert forget_finished_runs(alias, limit=2, rest=2.0, sleep=rests.append) == 3
    assert len(rests) == 1 and rests[0] > 0  # after the one full page; the short last page ends it
    assert not WorkflowRun.objects.exists()
