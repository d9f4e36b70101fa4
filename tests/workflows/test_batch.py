"""Batches (docs/workflows.md, "Batches"): members join inside ``with batch:``, the callbacks
run once, after every member ended and the batch closed; a member's end costs the same
statements whatever the batch's size; on both dialects.

Members run on a real worker in this process (``run_until_done``, as in test_workflows.py).
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

import cairnq_django as cq
from cairnq_django.models import Task
from cairnq_django.store import get_store
from cairnq_django.workflows import advance
from cairnq_django.workflows.models import WorkflowNode, WorkflowRun
from cairnq_django.workflows.run import parent_results

from .test_workflows import STEP, run_until_done, states


def callbacks(**names: Any) -> dict[str, Any]:
    """Callback signatures whose payload names them, so their results say which ran."""
    return {kind: cq.signature(STEP, {"node": kind}) for kind in names}


def callback_states(batch: cq.Batch) -> dict[str, str]:
    return {name: state for name, state in states(batch.run).items() if name.startswith("on_")}


def test_every_member_succeeding_runs_on_success_and_on_finish_once(cairnq_db: Any) -> None:
    batch = cq.Batch(**callbacks(on_success=1, on_failure=1, on_finish=1))
    with batch:
        rows = [cq.submit(STEP, {"node": i}) for i in range(3)]
        rows += cq.submit_many([(STEP, {"node": 3}), (STEP, {"node": 4})])
    assert {row.correlation_id for row in rows} == {batch.id}
    # The callbacks wait in the app's tables: only the members are tasks.
    assert Task.objects.count() == 5
    run_until_done(batch.run)
    assert callback_states(batch) == {"on_success": "succeeded", "on_failure": "skipped", "on_finish": "succeeded"}
    assert batch.run.status == "succeeded"
    row = batch.run.row()
    assert (row.kind, row.nodes_total, row.nodes_left, row.nodes_failed) == ("batch", 8, 0, 0)
    assert Task.objects.count() == 7  # each callback that ran inserted once
    # Its parents are the members, by node name; never the other callback, which ran beside it.
    members = {f"{STEP}#{n + 1}": {"node": n, "parents": {}} for n in range(5)}
    assert batch.run.results()["on_finish"] == {"node": "on_finish", "parents": members}
    assert batch.run.results()["on_success"] == {"node": "on_success", "parents": members}


def test_a_failed_member_runs_on_failure_not_on_success(cairnq_db: Any) -> None:
    # The demo app's tasks register on import: imported by the test that submits by handler.
    from testproject.demo.tasks import wf_step

    batch = cq.Batch(**callbacks(on_success=1, on_failure=1, on_finish=1))
    with batch:
        wf_step.submit({"node": "ok"})
        wf_step.submit({"fail": True})
    run_until_done(batch.run)
    assert callback_states(batch) == {"on_success": "skipped", "on_failure": "succeeded", "on_finish": "succeeded"}
    assert batch.run.status == "failed"
    assert batch.run.nodes()["on_success"].error == "skipped: a member failed"


def test_a_callbacks_parent_results_are_the_members_that_succeeded(cairnq_db: Any) -> None:
    # The demo app's tasks register on import: imported by the test that submits by handler.
    from testproject.demo.tasks import wf_step

    batch = cq.Batch(**callbacks(on_success=1, on_failure=1, on_finish=1))
    with batch:
        wf_step.submit({"node": "first"})
        wf_step.submit({"fail": True})
        cq.submit_many([(STEP, {"node": "third"}), (STEP, {"node": "fourth"})])
    run_until_done(batch.run)
    succeeded = {
        f"{STEP}#1": {"node": "first", "parents": {}},
        f"{STEP}#3": {"node": "third", "parents": {}},
        f"{STEP}#4": {"node": "fourth", "parents": {}},
    }
    results = batch.run.results()
    assert results["on_finish"]["parents"] == succeeded
    assert results["on_failure"]["parents"] == succeeded
    assert "on_success" not in results


def test_a_callbacks_parent_results_take_a_bounded_number_of_queries(cairnq_db: Any) -> None:
    size = 2_001
    batch = cq.Batch(**callbacks(on_finish=1))
    with batch:
        members = cq.submit_many([(STEP, {"node": n}) for n in range(size)])
    cq.cancel(members[0].id)  # one member that did not succeed
    store = get_store()
    claimed = store.claim(["default"], "worker_upstream", lease_ms=60_000, limit=size)
    store.complete_many("worker_upstream", [(row.id, json.dumps({"n": row.payload["node"]})) for row in claimed])
    advance.tasks_ended(store.alias, [(members[0].id, "canceled")] + [(row.id, "succeeded") for row in claimed])
    on_finish = batch.run.nodes()["on_finish"]
    assert on_finish.state == "released"
    with CaptureQueriesContext(connection) as queries:
        found = parent_results(on_finish.task_id)
    # The callback's node, the succeeded members, then their results 1,000 ids a query.
    assert len(queries) == 2 + 2, [query["sql"][:120] for query in queries]
    assert found == {f"{STEP}#{n + 1}": {"n": n} for n in range(1, size)}


def test_a_workflow_node_named_like_a_callback_reads_its_own_parents(cairnq_db: Any) -> None:
    wf = cq.Workflow("not a batch")
    first = wf.add("first", STEP, {"node": "first"})
    wf.add("unrelated", STEP, {"node": "unrelated"})
    wf.add("on_finish", STEP, {"node": "on_finish"}, after=[first])
    run = wf.submit()
    run_until_done(run)
    assert run.results()["on_finish"]["parents"] == {"first": {"node": "first", "parents": {}}}


def test_callbacks_wait_for_the_close_and_a_member_added_after_others_ended_counts(cairnq_db: Any) -> None:
    batch = cq.Batch(**callbacks(on_success=1, on_failure=1))
    with batch:
        cq.submit(STEP, {"node": "first"})
        # The first member ends while the batch is open: nothing may be released yet.
        run_until_done_members(batch)
        assert callback_states(batch) == {"on_success": "held", "on_failure": "held"}
        assert batch.run.row().nodes_left == 3  # two callbacks and the open batch
        cq.submit(STEP, {"fail": True})
    row = batch.run.row()
    assert (row.nodes_total, row.nodes_left) == (4, 3)  # "2 of 4": the late member and two callbacks left
    run_until_done(batch.run)
    assert callback_states(batch) == {"on_success": "skipped", "on_failure": "succeeded"}


def run_until_done_members(batch: cq.Batch) -> None:
    """Run the worker until every member so far has ended (the run itself stays open)."""
    # Only this helper runs the worker without the sweep.
    from django.core.management import call_command

    for _ in range(10):
        if not Task.objects.filter(correlation_id=batch.id).exclude(status__in=["succeeded", "failed"]).exists():
            return
        call_command("cairnq_worker", "--burst", "--task", STEP, verbosity=0)
    raise AssertionError("members did not end")


def test_a_keyed_submit_that_finds_a_task_joins_nothing_and_counts_nothing(cairnq_db: Any) -> None:
    existing = cq.submit(STEP, {"node": "outside"}, key="report-7")
    batch = cq.Batch(**callbacks(on_finish=1))
    with batch:
        again = cq.submit(STEP, {"node": "again"}, key="report-7")
        rows = cq.submit_many([{"name": STEP, "key": "report-7"}, (STEP, {"node": "new"})])
    assert again.id == rows[0].id == existing.id
    assert Task.objects.get(id=existing.id).correlation_id is None  # not made a member
    row = batch.run.row()
    assert (row.nodes_total, row.nodes_left) == (2, 2)  # the one new member and the callback
    assert batch.run.nodes()["on_finish"].parents_left == 1
    run_until_done(batch.run)
    assert callback_states(batch) == {"on_finish": "succeeded"}
    assert set(batch.run.results()["on_finish"]["parents"]) == {f"{STEP}#3"}


def test_an_empty_batch_runs_on_success_and_on_finish_at_its_close(cairnq_db: Any) -> None:
    batch = cq.Batch(**callbacks(on_success=1, on_failure=1, on_finish=1))
    with batch:
        pass
    assert callback_states(batch) == {"on_success": "released", "on_failure": "skipped", "on_finish": "released"}
    run_until_done(batch.run)
    assert batch.run.status == "succeeded"


def test_a_batch_without_callbacks_ends_with_its_last_member_not_before_its_close(cairnq_db: Any) -> None:
    batch = cq.Batch()
    with batch:
        cq.submit(STEP)
        run_until_done_members(batch)
        assert batch.run.status == "running" and not batch.run.done
    assert batch.run.status == "succeeded" and batch.run.done


def test_a_batch_in_a_rolled_back_transaction_leaves_nothing(cairnq_db: Any) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        with cq.Batch(**callbacks(on_finish=1)):
            cq.submit(STEP)
            cq.submit_many([(STEP, {}), (STEP, {})])
        raise RuntimeError("the request failed")
    assert not WorkflowRun.objects.exists() and not WorkflowNode.objects.exists() and not Task.objects.exists()


def test_an_exception_in_the_block_still_closes_the_batch_for_what_was_submitted(cairnq_db: Any) -> None:
    batch = cq.Batch(**callbacks(on_finish=1))
    with pytest.raises(RuntimeError), batch:
        cq.submit(STEP)
        raise RuntimeError("the loop broke half way")
    run_until_done(batch.run)
    assert callback_states(batch) == {"on_finish": "succeeded"}


def test_a_member_end_seen_twice_counts_once(cairnq_db: Any) -> None:
    batch = cq.Batch(**callbacks(on_success=1, on_finish=1))
    with batch:
        first = cq.submit(STEP)
        second = cq.submit(STEP)
    store = get_store()
    alias = store.alias
    for row in (first, second):
        [claimed] = store.claim(["default"], "worker_upstream", lease_ms=30_000)
        store.complete(claimed.id, "worker_upstream", None)
    assert advance.tasks_ended(alias, [(first.id, "succeeded")]) == 1
    assert advance.tasks_ended(alias, [(first.id, "succeeded")]) == 0  # the same end again: nothing
    assert callback_states(batch) == {"on_success": "held", "on_finish": "held"}
    assert advance.sweep(alias) == 1  # the second member, which no event announced
    assert advance.sweep(alias) == 0
    assert advance.tasks_ended(alias, [(second.id, "succeeded")]) == 0
    assert callback_states(batch) == {"on_success": "released", "on_finish": "released"}
    assert Task.objects.filter(correlation_id=batch.id).count() == 4  # each callback inserted once
    run_until_done(batch.run)
    assert batch.run.status == "succeeded"


def test_a_member_end_costs_the_same_statements_whatever_the_batch_size(cairnq_db: Any) -> None:
    counts = []
    store = get_store()
    for size in (10, 100):
        batch = cq.Batch(**callbacks(on_success=1, on_failure=1, on_finish=1))
        with batch:
            cq.submit_many([(STEP, {"node": i}) for i in range(size)])
        [claimed] = store.claim(["default"], "worker_upstream", lease_ms=30_000)
        store.complete(claimed.id, "worker_upstream", None)
        with CaptureQueriesContext(connection) as queries:
            assert advance.tasks_ended(store.alias, [(claimed.id, "succeeded")]) == 1
        counts.append(len(queries))
        WorkflowRun.objects.filter(id=batch.id).delete()
        Task.objects.all().delete()
    assert counts[0] == counts[1], counts


def test_the_batch_is_this_contexts_only(cairnq_db: Any) -> None:
    seen: list[Any] = []
    with cq.Batch() as batch:
        # A thread started here begins with an empty context: its submits join nothing.
        thread = threading.Thread(target=lambda: seen.append(_current()))
        thread.start()
        thread.join()
        cq.submit(STEP)
    outside = cq.submit(STEP)
    assert seen == [None]
    assert outside.correlation_id is None
    assert WorkflowNode.objects.filter(run_id=batch.id).count() == 1
    with pytest.raises(cq.WorkflowError, match="entered already"):
        with batch:
            pass


def _current() -> Any:
    # Read as the package's submit reads it; only this helper needs it.
    from cairnq_django.workflows.current import current_batch

    return current_batch.get()


def test_async_with_batch_and_asubmit_join(cairnq_db: Any) -> None:
    batch = cq.Batch(**callbacks(on_finish=1))

    async def main() -> None:
        async with batch:
            await cq.asubmit(STEP, {"node": 1})
            await cq.asubmit_many([(STEP, {"node": 2})])

    try:
        asyncio.run(main())
    finally:
        # The thread-sensitive thread keeps its connection open: closed, or the test database cannot be dropped.
        asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())
    assert WorkflowNode.objects.filter(run_id=batch.id, state="released").count() == 2
    run_until_done(batch.run)
    assert callback_states(batch) == {"on_finish": "succeeded"}


def test_a_callback_that_is_not_a_signature_is_refused(cairnq_db: Any) -> None:
    with pytest.raises(cq.WorkflowError, match="on_finish= takes a signature"):
        cq.Batch(on_finish=STEP)
    assert not WorkflowRun.objects.exists()


def test_the_settling_worker_counts_a_member_down_itself(cairnq_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The repair pass switched off: only the settlement's transaction can release the callback.
    monkeypatch.setattr("cairnq_django.worker.housekeeping.advance_stalled_workflows", lambda alias, limit: 0)
    batch = cq.Batch(**callbacks(on_finish=1))
    with batch:
        member = cq.submit(STEP)
    assert member.metadata["cairnq_django"] == {"workflow": batch.id, "node": f"{STEP}#1"}
    run_until_done_members(batch)
    # Released by the settlement (the burst worker may have run it already).
    assert callback_states(batch)["on_finish"] in ("released", "succeeded")


def test_cancel_workflow_on_an_open_batch_cancels_its_callbacks_and_it_ends_at_the_close(cairnq_db: Any) -> None:
    batch = cq.Batch(**callbacks(on_success=1, on_finish=1))
    with batch:
        cq.submit(STEP)
        assert cq.cancel_workflow(batch.id) == 3  # the member's task and two held callbacks
        advance.sweep(get_store().alias)
        assert not batch.run.done  # still open
    assert callback_states(batch) == {"on_success": "canceled", "on_finish": "canceled"}
    row = batch.run.row()
    assert (row.status, row.nodes_left, row.finished_at_ms is not None) == ("canceled", 0, True)


def test_retry_workflow_refuses_a_batch(cairnq_db: Any) -> None:
    with cq.Batch() as batch:
        cq.submit(STEP, {"fail": True})
    run_until_done(batch.run)
    with pytest.raises(cq.WorkflowError, match="is a batch"):
        cq.retry_workflow(batch.id)
