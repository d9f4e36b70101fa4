"""Canceling a batch (docs/workflows.md, "Batches"): while its block is open a submit is
refused with nothing written, whoever canceled; the close after a cancel fails on nothing
and releases nothing; no callback runs on a canceled batch; a cancel after the close or
after the end; on both dialects.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections, transaction

import cairnq_django as cq
from cairnq_django.models import Task
from cairnq_django.store import get_store
from cairnq_django.workflows import advance
from cairnq_django.workflows.models import WorkflowNode

from .test_batch import callback_states, callbacks
from .test_workflows import STEP, run_until_done

ALL_CALLBACKS = {"on_success": 1, "on_failure": 1, "on_finish": 1}
ALL_CANCELED = {"on_success": "canceled", "on_failure": "canceled", "on_finish": "canceled"}


def node_names(batch: cq.Batch) -> set[str]:
    return set(WorkflowNode.objects.filter(run_id=batch.id).values_list("name", flat=True))


def refused(batch: cq.Batch) -> Any:
    return pytest.raises(cq.WorkflowError, match=rf"^batch '{batch.name}' \({batch.id}\) was canceled")


def end_members_elsewhere(batch: cq.Batch) -> None:
    """Complete every queued member as another SDK's worker would, and advance the run."""
    store = get_store()
    claimed = store.claim(["default"], "worker_upstream", lease_ms=30_000, limit=100)
    store.complete_many("worker_upstream", [(row.id, None) for row in claimed])
    advance.tasks_ended(store.alias, [(row.id, "succeeded") for row in claimed])


def test_a_submit_after_a_cancel_in_the_open_block_is_refused_and_writes_nothing(cairnq_db: Any) -> None:
    batch = cq.Batch("mail", **callbacks(**ALL_CALLBACKS))
    with batch:
        member = cq.submit(STEP, {"node": "before"})
        assert cq.cancel_workflow(batch.id) == 4  # the member's task and the three held callbacks
        with refused(batch):
            cq.submit(STEP, {"node": "after"})
        with refused(batch):
            cq.submit_many([(STEP, {"node": "after"}), (STEP, {"node": "after too"})])
        assert [row.id for row in Task.objects.all()] == [member.id]
        assert node_names(batch) == {f"{STEP}#1", "on_success", "on_failure", "on_finish"}
    # The close did not fail and released nothing the cancel had ended.
    assert callback_states(batch) == ALL_CANCELED
    assert Task.objects.get(id=member.id).status == "canceled"
    row = batch.run.row()
    assert (row.status, row.nodes_total, row.nodes_left) == ("canceled", 4, 1)  # the member's end not seen yet
    advance.sweep(get_store().alias)
    row = batch.run.row()
    assert (row.status, row.nodes_left, row.finished_at_ms is not None) == ("canceled", 0, True)
    assert batch.run.nodes()[f"{STEP}#1"].state == "canceled"
    assert Task.objects.count() == 1  # no callback ever became a task


def test_a_cancel_from_another_connection_is_seen_by_the_open_block(cairnq_db: Any) -> None:
    # As the admin or another process would: the batch object is told nothing, the run's row says it.
    def cancel_elsewhere(run_id: str) -> None:
        try:
            cq.cancel_workflow(run_id)
        finally:
            connections.close_all()

    batch = cq.Batch("import", **callbacks(on_finish=1))
    with batch:
        cq.submit(STEP)
        thread = threading.Thread(target=cancel_elsewhere, args=(batch.id,))
        thread.start()
        thread.join()
        with refused(batch):
            cq.submit(STEP)
    assert node_names(batch) == {f"{STEP}#1", "on_finish"}
    assert Task.objects.count() == 1
    run_until_done(batch.run)
    assert batch.run.status == "canceled"
    assert callback_states(batch) == {"on_finish": "canceled"}


def test_a_submit_racing_a_cancel_waits_for_it_and_is_refused(cairnq_db: Any) -> None:
    batch = cq.Batch("race", **callbacks(on_finish=1))
    canceled, commit = threading.Event(), threading.Event()

    def cancel_and_hold() -> None:
        try:
            with transaction.atomic():
                cq.cancel_workflow(batch.id)
                canceled.set()
                commit.wait(10)  # the cancel's transaction stays open while the submit arrives
        finally:
            connections.close_all()

    with batch:
        cq.submit(STEP)
        thread = threading.Thread(target=cancel_and_hold)
        thread.start()
        assert canceled.wait(10)
        timer = threading.Timer(0.5, commit.set)
        started = time.monotonic()
        timer.start()
        try:
            with refused(batch):
                cq.submit(STEP)  # blocks on the run's row (or the SQLite write lock) until the cancel commits
            waited = time.monotonic() - started
        finally:
            commit.set()
            timer.cancel()
            thread.join()
    assert waited >= 0.4  # it did wait for the cancel's commit
    assert Task.objects.count() == 1
    assert node_names(batch) == {f"{STEP}#1", "on_finish"}
    run_until_done(batch.run)
    assert (batch.run.status, callback_states(batch)) == ("canceled", {"on_finish": "canceled"})


def test_async_with_a_canceled_batch_refuses_asubmit_and_asubmit_many(cairnq_db: Any) -> None:
    batch = cq.Batch("async", **callbacks(**ALL_CALLBACKS))
    messages: list[str] = []

    async def main() -> None:
        async with batch:
            await cq.asubmit(STEP, {"node": 1})
            await sync_to_async(cq.cancel_workflow, thread_sensitive=True)(batch.id)
            with refused(batch) as first:
                await cq.asubmit(STEP, {"node": 2})
            with refused(batch) as second:
                await cq.asubmit_many([(STEP, {"node": 3})])
            messages.extend([str(first.value), str(second.value)])

    try:
        asyncio.run(main())
    finally:
        # The thread-sensitive thread keeps its connection open: closed, or the test database cannot be dropped.
        asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())
    expected = (
        f"batch 'async' ({batch.id}) was canceled (cairnq.cancel_workflow): "
        "it takes no more tasks; nothing was submitted"
    )
    assert messages == [expected, expected]
    assert node_names(batch) == {f"{STEP}#1", "on_success", "on_failure", "on_finish"}
    assert Task.objects.count() == 1
    run_until_done(batch.run)
    assert (batch.run.status, callback_states(batch)) == ("canceled", ALL_CANCELED)


def test_the_refusal_raised_out_of_the_block_still_closes_the_batch(cairnq_db: Any) -> None:
    batch = cq.Batch("loop", **callbacks(on_finish=1))
    # Matched loosely: the run id is not known before the block opens.
    with pytest.raises(cq.WorkflowError, match="^batch 'loop' .* was canceled"), batch:
        cq.submit(STEP)
        cq.cancel_workflow(batch.id)
        cq.submit(STEP)  # uncaught: the block ends here
    run_until_done(batch.run)  # ends only if the close counted the run down
    row = batch.run.row()
    assert (row.status, row.nodes_total, row.nodes_left) == ("canceled", 2, 0)
    assert callback_states(batch) == {"on_finish": "canceled"}


def test_a_refused_submit_rolls_back_only_itself_in_the_callers_transaction(cairnq_db: Any) -> None:
    batch = cq.Batch("request", **callbacks(on_finish=1))
    with transaction.atomic():
        with batch:
            member = cq.submit(STEP)
            cq.cancel_workflow(batch.id)
            with refused(batch):
                cq.submit(STEP)
            # The transaction goes on: the refusal rolled back its own savepoint only.
            outside = Task.objects.count()
    assert outside == 1
    # Committed: the batch, its canceled member and callback; nothing of the refused submit.
    assert Task.objects.get().id == member.id
    assert node_names(batch) == {f"{STEP}#1", "on_finish"}
    run_until_done(batch.run)
    assert (batch.run.status, callback_states(batch)) == ("canceled", {"on_finish": "canceled"})


def test_a_cancel_after_the_close_cancels_the_members_and_runs_no_callback(cairnq_db: Any) -> None:
    batch = cq.Batch(**callbacks(**ALL_CALLBACKS))
    with batch:
        members = cq.submit_many([(STEP, {"node": 1}), (STEP, {"node": 2})])
    assert cq.cancel_workflow(batch.id) == 5  # two queued members, three held callbacks
    run_until_done(batch.run)
    assert batch.run.status == "canceled"
    assert callback_states(batch) == ALL_CANCELED
    assert batch.run.nodes()["on_finish"].error == "canceled: the workflow was canceled"
    assert sorted(Task.objects.values_list("id", "status")) == sorted((row.id, "canceled") for row in members)


def test_a_cancel_once_the_callbacks_were_released_cancels_their_tasks(cairnq_db: Any) -> None:
    batch = cq.Batch(**callbacks(**ALL_CALLBACKS))
    with batch:
        cq.submit(STEP)
    end_members_elsewhere(batch)
    assert callback_states(batch) == {"on_success": "released", "on_failure": "skipped", "on_finish": "released"}
    assert cq.cancel_workflow(batch.id) == 2  # the two callbacks' queued tasks
    run_until_done(batch.run)
    assert batch.run.status == "canceled"
    assert callback_states(batch) == {"on_success": "canceled", "on_failure": "skipped", "on_finish": "canceled"}
    assert sorted(Task.objects.values_list("status", flat=True)) == ["canceled", "canceled", "succeeded"]


def test_a_cancel_after_the_end_changes_nothing(cairnq_db: Any) -> None:
    batch = cq.Batch(**callbacks(**ALL_CALLBACKS))
    with batch:
        cq.submit(STEP)
    run_until_done(batch.run)
    before = (batch.run.status, callback_states(batch), batch.run.row().finished_at_ms)
    assert cq.cancel_workflow(batch.id) == 0
    assert (batch.run.status, callback_states(batch), batch.run.row().finished_at_ms) == before
    assert before[0] == "succeeded"
