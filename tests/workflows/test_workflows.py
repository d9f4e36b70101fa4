"""Workflows (docs/workflows.md): held nodes, advancement exactly once, failure policies,
chain / group / chord, bad input refused with nothing written, on both dialects.

Nodes run on a real worker (``cairnq_worker --burst`` in this process, again
until the run has ended); what another SDK's worker would do is done with the
store's own calls, and the sweeper's pass is called directly.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

import cairnq_django as cq
from cairnq_django.models import Task
from cairnq_django.store import get_store
from cairnq_django.workflows import advance, graph
from cairnq_django.workflows.models import NodeState, WorkflowEdge, WorkflowNode, WorkflowRun

STEP = "demo.wf.step"


def run_until_done(run: Any, rounds: int = 20) -> None:
    """Run burst workers until every node of ``run`` has ended."""
    for _ in range(rounds):
        if run.done:
            return
        call_command("cairnq_worker", "--burst", "--task", STEP, "--concurrency", "2", verbosity=0)
        advance.sweep(get_store().alias)
    raise AssertionError(f"{run} did not end: {run.nodes()}")


def task_rows(run: Any) -> list[Task]:
    return list(Task.objects.filter(correlation_id=run.id))


def states(run: Any) -> dict[str, str]:
    return {name: node.state for name, node in run.nodes().items()}


def test_a_dag_runs_each_node_once_its_parents_ended_and_results_are_keyed_by_node(cairnq_db: Any) -> None:
    wf = cq.Workflow("onboard")
    a = wf.add("fetch", STEP, {"node": "fetch"})
    b = wf.add("parse", STEP, {"node": "parse"}, after=[a])
    c = wf.add("thumbs", STEP, {"node": "thumbs"}, after=["fetch"])
    wf.add("index", STEP, {"node": "index"}, after=[b, c])
    run = wf.submit()
    # Only the root has a task row: the others wait in the app's tables, invisible to every SDK.
    assert [t.name for t in task_rows(run)] == [STEP]
    assert states(run) == {"fetch": "released", "parse": "held", "thumbs": "held", "index": "held"}
    run_until_done(run)
    assert run.status == "succeeded"
    results = run.results()
    assert set(results) == {"fetch", "parse", "thumbs", "index"}
    assert results["index"]["parents"] == {
        "parse": {"node": "parse", "parents": {"fetch": {"node": "fetch", "parents": {}}}},
        "thumbs": {"node": "thumbs", "parents": {"fetch": {"node": "fetch", "parents": {}}}},
    }
    assert len(task_rows(run)) == 4  # each node's task inserted exactly once
    row = run.row()
    assert (row.nodes_left, row.nodes_failed, row.finished_at_ms is not None) == (0, 0, True)


def test_failure_policies_cancel_skip_and_run(cairnq_db: Any) -> None:
    wf = cq.Workflow("policies")
    bad = wf.add("bad", STEP, {"fail": True})
    wf.add("canceled", STEP, after=[bad])  # the default: cancel
    skipped = wf.add("skipped", STEP, after=[bad], on_parent_failure="skip")
    wf.add("ran", STEP, after=[bad], on_parent_failure="run")
    wf.add("after_skip", STEP, after=[skipped])  # a skipped parent is no failure
    wf.add("after_cancel", STEP, after=["canceled"], on_parent_failure="skip")
    run = wf.submit()
    run_until_done(run)
    assert states(run) == {
        "bad": "failed",
        "canceled": "canceled",
        "skipped": "skipped",
        "ran": "succeeded",
        "after_skip": "succeeded",
        "after_cancel": "skipped",
    }
    nodes = run.nodes()
    assert "a parent failed" in nodes["canceled"].error
    assert nodes["canceled"].task_id is None  # never inserted
    assert run.status == "failed"
    assert set(run.results()) == {"ran", "after_skip"}
    assert run.results()["ran"]["parents"] == {}  # the failed parent returned nothing


def test_chain_runs_its_steps_in_order(cairnq_db: Any) -> None:
    run = cq.chain(cq.signature(STEP, {"node": 1}), cq.signature(STEP, {"node": 2}), cq.signature(STEP, {"node": 3})).submit()
    run_until_done(run)
    results = run.results()
    assert set(results) == {STEP, f"{STEP}-2", f"{STEP}-3"}
    assert set(results[f"{STEP}-3"]["parents"]) == {f"{STEP}-2"}
    assert set(results[f"{STEP}-2"]["parents"]) == {STEP}
    assert run.row().kind == "chain"


def test_group_and_chord(cairnq_db: Any) -> None:
    from testproject.demo.tasks import wf_step

    group = cq.group(wf_step.s({"node": i}) for i in range(3)).submit()
    assert len(task_rows(group)) == 3  # all released at once
    chord = cq.chord((wf_step.s({"node": i}) for i in range(5)), wf_step.s({"node": "callback"})).submit()
    assert len(task_rows(chord)) == 5  # the callback waits
    run_until_done(group)
    run_until_done(chord)
    assert group.status == chord.status == "succeeded"
    callback = chord.results()[f"{STEP}-6"]
    assert callback["node"] == "callback" and len(callback["parents"]) == 5


def test_a_chords_callback_is_canceled_when_a_header_step_fails(cairnq_db: Any) -> None:
    run = cq.chord([cq.signature(STEP), cq.signature(STEP, {"fail": True})], cq.signature(STEP)).submit()
    run_until_done(run)
    assert states(run)[f"{STEP}-3"] == "canceled"
    assert run.status == "failed"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda wf: (wf.add("a", STEP, after=["c"]), wf.add("b", STEP, after=["a"]), wf.add("c", STEP, after=["b"])),
         "cycle: a -> b -> c -> a"),
        (lambda wf: (wf.add("a", STEP), wf.add("a", STEP)), "already has a node named 'a'"),
        (lambda wf: wf.add("a", STEP, after=["ghost"]), "'ghost', which workflow 'bad' has no node of"),
        (lambda wf: wf.add("a", STEP, after=[cq.Workflow("other").add("x", STEP)]), "of workflow 'other'"),
        (lambda wf: wf.add("a", STEP, on_parent_failure="maybe"), "on_parent_failure must be one of"),
        (lambda wf: wf.add("a", STEP, after=["a"]), "runs after itself"),
        (lambda wf: None, "has no nodes"),
    ],
)
def test_a_bad_graph_is_refused_naming_what_is_wrong_and_writes_nothing(
    cairnq_db: Any, build: Any, message: str
) -> None:
    wf = cq.Workflow("bad")
    with pytest.raises(cq.WorkflowError, match=message.replace("(", r"\(")):
        build(wf)
        wf.submit()
    assert not WorkflowRun.objects.exists() and not Task.objects.exists()


def test_a_payload_json_cannot_carry_and_a_graph_over_the_limit_are_refused(
    cairnq_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    wf = cq.Workflow("bad")
    with pytest.raises(cq.SerializationError):
        wf.add("a", STEP, {"when": object()})
    monkeypatch.setattr(graph, "MAX_NODES", 2)
    for name in "abc":
        wf.add(name, STEP)
    with pytest.raises(cq.WorkflowError, match="3 nodes; at most 2"):
        wf.submit()
    assert not WorkflowRun.objects.exists() and not WorkflowNode.objects.exists()


def test_a_key_in_use_returns_the_run_that_holds_it(cairnq_db: Any) -> None:
    first = cq.chain(cq.signature(STEP), key="onboard:42").submit()
    again = cq.chain(cq.signature(STEP), cq.signature(STEP), key="onboard:42").submit()
    assert again == first and WorkflowRun.objects.count() == 1 and Task.objects.count() == 1


def test_a_workflow_submitted_in_a_rolled_back_transaction_leaves_nothing(cairnq_db: Any) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        cq.chain(cq.signature(STEP), cq.signature(STEP)).submit()
        raise RuntimeError("the request failed")
    assert not WorkflowRun.objects.exists() and not WorkflowNode.objects.exists() and not Task.objects.exists()


def test_a_node_another_worker_ended_is_advanced_by_the_sweep_exactly_once(cairnq_db: Any) -> None:
    run = cq.chain(cq.signature(STEP), cq.signature(STEP)).submit()
    store = get_store()
    # Another SDK's worker: claims and completes with the protocol's own statements.
    [claimed] = store.claim(["default"], "worker_upstream", lease_ms=30_000)
    store.complete(claimed.id, "worker_upstream", '{"by": "upstream"}')
    assert states(run)[f"{STEP}-2"] == "held"
    assert advance.sweep(store.alias) == 1
    assert advance.sweep(store.alias) == 0  # nothing left to do: no second release
    assert advance.tasks_ended(store.alias, [(claimed.id, "succeeded")]) == 0  # a late event is a no-op
    assert len(task_rows(run)) == 2 and states(run)[f"{STEP}-2"] == "released"
    run_until_done(run)
    assert run.results()[f"{STEP}-2"]["parents"] == {STEP: {"by": "upstream"}}


def test_a_purged_nodes_task_ends_the_node_as_failed(cairnq_db: Any) -> None:
    run = cq.chain(cq.signature(STEP), cq.signature(STEP)).submit()
    Task.objects.filter(correlation_id=run.id).delete()
    assert advance.sweep(get_store().alias) == 2  # the gone one failed, its child canceled
    assert states(run) == {STEP: "failed", f"{STEP}-2": "canceled"}
    assert advance.ROW_GONE in run.nodes()[STEP].error
    assert run.status == "failed"


def test_cancel_workflow_cancels_held_nodes_and_running_tasks(cairnq_db: Any) -> None:
    run = cq.chain(cq.signature(STEP), cq.signature(STEP), cq.signature(STEP)).submit()
    assert cq.cancel_workflow(run.id) == 3
    assert run.status == "canceled"
    assert Task.objects.get(correlation_id=run.id).status == "canceled"  # queued: canceled at once
    advance.sweep(get_store().alias)
    assert set(states(run).values()) == {NodeState.CANCELED}
    assert run.done and run.status == "canceled"
    with pytest.raises(cq.WorkflowNotFound):
        cq.cancel_workflow("wf_nope")


def test_cancel_workflow_starts_over_when_a_settlement_deadlocks_it(cairnq_db: Any, dialect: str) -> None:
    """The cancel locks the run then its tasks; a settling worker the task then the run. PostgreSQL ends
    the cancel as the deadlock's victim (it waited first); the cancel starts over and succeeds."""
    if dialect != "postgres":
        pytest.skip("SQLite runs one writer at a time: there is no deadlock to meet")
    run = cq.chain(cq.signature(STEP), cq.signature(STEP)).submit()
    [claimed] = get_store().claim(["default"], "worker_settling", lease_ms=30_000)
    settling = connections.create_connection("default")
    answer: list[Any] = []
    try:
        with settling.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("UPDATE cairnq_tasks SET progress = 0.5 WHERE id = %s", [claimed.id])
            canceling = threading.Thread(target=lambda: answer.append(_outcome(cq.cancel_workflow, run.id)))
            canceling.start()
            time.sleep(0.3)  # the cancel holds the run and waits for the task
            # The settlement's advance takes the run: a deadlock, detected by the cancel (it waited first).
            cursor.execute("UPDATE cairnq_django_workflow SET nodes_failed = nodes_failed WHERE id = %s", [run.id])
            cursor.execute("COMMIT")
        canceling.join(30)
    finally:
        settling.close()
    assert answer == [2], answer  # one held node canceled, one running task asked to cancel
    assert run.status == "canceled"


def _outcome(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception as exc:  # noqa: BLE001 - the test reads what the thread raised
        return exc
    finally:
        connection.close()


def test_fan_in_costs_the_same_statements_per_parent_whatever_the_width(cairnq_db: Any) -> None:
    counts = []
    alias = get_store().alias
    for width in (10, 100):
        run = cq.chord([cq.signature(STEP) for _ in range(width)], cq.signature(STEP)).submit()
        store = get_store()
        [first] = store.claim(["default"], "worker_upstream", lease_ms=30_000)
        store.complete(first.id, "worker_upstream", None)
        with CaptureQueriesContext(connection) as queries:
            assert advance.tasks_ended(alias, [(first.id, "succeeded")]) == 1
        counts.append(len(queries))
        WorkflowRun.objects.filter(id=run.id).delete()
        Task.objects.all().delete()
    assert counts[0] == counts[1], counts


def test_a_settlement_of_many_nodes_costs_the_same_statements_as_one(cairnq_db: Any) -> None:
    """Each step of an advance is one statement for all its nodes: ending 1, 5 or 50 group members together
    (and releasing the callbacks that waits on them) costs the same, so a drain of nodes settles as plain tasks do."""
    counts = []
    alias = get_store().alias
    store = get_store()
    for width in (1, 5, 50):
        run = cq.chord([cq.signature(STEP) for _ in range(width)], cq.signature(STEP)).submit()
        claimed = store.claim(["default"], "worker_upstream", lease_ms=30_000, limit=width)
        assert len(claimed) == width
        for task in claimed:
            store.complete(task.id, "worker_upstream", None)
        with CaptureQueriesContext(connection) as queries:
            assert advance.tasks_ended(alias, [(task.id, "succeeded") for task in claimed]) == width
        counts.append(len(queries))
        assert states(run)[f"{STEP}-{width + 1}"] == "released"  # the callback, once
        assert run.row().nodes_left == 1
        WorkflowRun.objects.filter(id=run.id).delete()
        Task.objects.all().delete()
    assert counts[0] == counts[1] == counts[2], counts


def test_a_failure_cancels_the_rest_of_a_long_chain_in_one_transaction(cairnq_db: Any) -> None:
    run = cq.chain(*[cq.signature(STEP) for _ in range(30)]).submit()
    store = get_store()
    [first] = store.claim(["default"], "worker_upstream", lease_ms=30_000)
    error = {"type": "ValueError", "code": "handler_error", "message": "no", "retryable": False, "details": {}}
    store.fail(first.id, "worker_upstream", error, retryable=False)
    assert advance.tasks_ended(store.alias, [(first.id, "failed")]) == 30
    assert list(states(run).values()).count("canceled") == 29
    assert run.done and run.status == "failed" and run.row().nodes_left == 0
    assert len(task_rows(run)) == 1  # nothing after the failure was released


def test_ends_of_nodes_without_children_skip_the_count_down(cairnq_db: Any) -> None:
    run = cq.group([cq.signature(STEP) for _ in range(5)]).submit()
    store = get_store()
    claimed = store.claim(["default"], "worker_upstream", lease_ms=30_000, limit=5)
    for task in claimed:
        store.complete(task.id, "worker_upstream", None)
    with CaptureQueriesContext(connection) as queries:
        assert advance.tasks_ended(store.alias, [(task.id, "succeeded") for task in claimed]) == 5
    sent = [query["sql"].splitlines()[0] for query in queries.captured_queries]
    assert "-- workflows: count_down" not in sent, sent
    assert "-- workflows: count_runs_down" in sent
    assert run.done and run.status == "succeeded"


def test_the_sweep_advances_many_stalled_nodes_together(cairnq_db: Any) -> None:
    run = cq.group([cq.signature(STEP) for _ in range(20)]).submit()
    store = get_store()
    for task in store.claim(["default"], "worker_upstream", lease_ms=30_000, limit=20):
        store.complete(task.id, "worker_upstream", None)
    with CaptureQueriesContext(connection) as queries:
        assert advance.sweep(store.alias) == 20
    assert len(queries) < 15, [query["sql"][:80] for query in queries.captured_queries]
    assert run.done and run.status == "succeeded"


def test_the_edges_and_nodes_of_a_run_are_its_own(cairnq_db: Any) -> None:
    one = cq.chain(cq.signature(STEP), cq.signature(STEP)).submit()
    two = cq.chain(cq.signature(STEP, queue="elsewhere"), cq.signature(STEP, queue="elsewhere")).submit()
    assert WorkflowEdge.objects.filter(run_id=one.id).count() == 1
    assert WorkflowEdge.objects.filter(run_id=two.id).count() == 1
    run_until_done(one)
    assert two.status == "running" and one.status == "succeeded"  # no worker serves "elsewhere"
    assert states(two) == {STEP: "released", f"{STEP}-2": "held"}


def test_retry_workflow_runs_the_failed_and_what_they_stopped_again_keeping_the_rest(cairnq_db: Any) -> None:
    wf = cq.Workflow("retried")
    ok = wf.add("ok", STEP, {"node": "ok"})
    bad = wf.add("bad", STEP, {"fail": True})
    wf.add("after", STEP, after=[ok, bad])
    run = wf.submit()
    run_until_done(run)
    assert states(run) == {"ok": "succeeded", "bad": "failed", "after": "canceled"}
    ok_task = run.nodes()["ok"].task_id
    # Make the failing step pass this time, as a fix deployed between the two would.
    WorkflowNode.objects.filter(run_id=run.id, name="bad").update(payload_json='{"node": "bad"}')
    assert cq.retry_workflow(run.id) == 2
    assert run.status == "running" and states(run) == {"ok": "succeeded", "bad": "released", "after": "held"}
    run_until_done(run)
    assert run.status == "succeeded"
    assert run.nodes()["ok"].task_id == ok_task  # not run again
    assert set(run.results()["after"]["parents"]) == {"ok", "bad"}
    assert cq.retry_workflow(run.id) == 0
    with pytest.raises(cq.WorkflowNotFound):
        cq.retry_workflow("wf_nope")


def test_retry_of_a_run_still_going_is_refused(cairnq_db: Any) -> None:
    run = cq.chain(cq.signature(STEP), cq.signature(STEP)).submit()
    with pytest.raises(cq.WorkflowError, match="still running"):
        cq.retry_workflow(run.id)


def test_the_settling_worker_advances_the_run_itself(cairnq_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The repair pass switched off: only the settlement's own transaction can release the next steps.
    monkeypatch.setattr("cairnq_django.worker.housekeeping.advance_stalled_workflows", lambda alias, limit: 0)
    run = cq.chain(cq.signature(STEP), cq.signature(STEP), cq.signature(STEP)).submit()
    for _ in range(5):
        call_command("cairnq_worker", "--burst", "--task", STEP, verbosity=0)
        if run.done:
            break
    assert run.status == "succeeded" and len(task_rows(run)) == 3


def test_an_advance_that_fails_leaves_the_settlement_written_and_the_repair_pass_finishes_it(
    cairnq_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(alias: str, ended: Any) -> int:
        raise RuntimeError("a bug in the advance")

    monkeypatch.setattr("cairnq_django.worker.settler.tasks_ended", broken)
    monkeypatch.setattr("cairnq_django.worker.housekeeping.advance_stalled_workflows", lambda alias, limit: 0)
    run = cq.chain(cq.signature(STEP), cq.signature(STEP)).submit()
    call_command("cairnq_worker", "--burst", "--task", STEP, verbosity=0)
    # The write and the advance were one transaction: rolled back together, then written alone.
    assert [t.status for t in task_rows(run)] == ["succeeded"]
    assert states(run) == {STEP: "released", f"{STEP}-2": "held"}
    assert advance.sweep(get_store().alias) == 1
    assert states(run)[f"{STEP}-2"] == "released"


def test_async_submit_and_await(cairnq_db: Any) -> None:
    import asyncio

    wf = cq.chain(cq.signature(STEP), cq.signature(STEP))

    async def submit_then_wait_briefly() -> Any:
        run = await wf.asubmit()
        with pytest.raises(cq.TaskTimeout):
            await run.await_(timeout=0.05)  # no worker yet
        return run

    from asgiref.sync import sync_to_async
    from django.db import connections

    try:
        run = asyncio.run(submit_then_wait_briefly())
        run_until_done(run)
        assert asyncio.run(run.await_(timeout=5)) is run and run.status == "succeeded"
    finally:
        # The thread-sensitive thread keeps its connection open: close it, or the test database cannot be dropped.
        asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())


def test_a_node_of_an_undeclared_name_is_judged_as_a_submit_is(cairnq_db: Any) -> None:
    from django.test import override_settings

    from cairnq_django.conf import get_config

    with override_settings(CAIRNQ={**get_config(), "UNKNOWN_TASKS": "raise"}):
        with pytest.raises(cq.UnknownTask):
            cq.Workflow("interop").add("middle", "interop.wf.upstream")
        with override_settings(CAIRNQ={**get_config(), "UNKNOWN_TASKS": "raise", "FOREIGN_TASKS": ["interop.*"]}):
            cq.Workflow("interop").add("middle", "interop.wf.upstream")  # another SDK's worker serves it
