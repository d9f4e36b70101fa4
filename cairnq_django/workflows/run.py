"""A submitted workflow run, read back: its status, its nodes' results, waiting for its end; cancel.

``WorkflowRunHandle`` is what ``Workflow.submit()``, ``chain(...).submit()``
and the others return; ``get_workflow(run_id)`` makes one for a run id.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction

from ..exceptions import TaskTimeout
from ..store import get_store
from . import advance
from .graph import WorkflowError
from .models import ENDED_STATES, NodeState, RunStatus, WorkflowEdge, WorkflowNode, WorkflowRun

POLL_S = 0.05
MAX_POLL_S = 0.5


class WorkflowNotFound(LookupError):
    """No workflow run has this id (or it was purged)."""


class WorkflowRunHandle:
    """One run by id; every property reads the database afresh."""

    def __init__(self, run_id: str) -> None:
        self.id = run_id

    def __repr__(self) -> str:
        return f"<WorkflowRunHandle {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WorkflowRunHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def _alias(self) -> str:
        return get_store().alias

    def row(self) -> WorkflowRun:
        """The run's row (``WorkflowNotFound`` if it is gone)."""
        try:
            return WorkflowRun.objects.using(self._alias).get(id=self.id)
        except WorkflowRun.DoesNotExist:
            raise WorkflowNotFound(self.id) from None

    @property
    def status(self) -> str:
        """``running``, ``succeeded``, ``failed`` or ``canceled``: one query."""
        found = WorkflowRun.objects.using(self._alias).filter(id=self.id).values_list("status", flat=True).first()
        if found is None:
            raise WorkflowNotFound(self.id)
        return str(found)

    @property
    def done(self) -> bool:
        """Whether every node has ended."""
        return self.row().nodes_left == 0

    def nodes(self) -> dict[str, WorkflowNode]:
        """The run's nodes by name."""
        return {node.name: node for node in WorkflowNode.objects.using(self._alias).filter(run_id=self.id)}

    def results(self) -> dict[str, Any]:
        """What each node that succeeded returned, by node name (a node that has not is left out)."""
        done = _succeeded_tasks(self._alias, WorkflowNode.objects.filter(run_id=self.id))
        return {done[task_id]: result for task_id, result in _results_of(self._alias, list(done))}

    def wait(self, timeout: float | None = 30.0) -> WorkflowRunHandle:
        """Block until every node has ended; raise ``TaskTimeout`` after ``timeout`` seconds (None: forever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = POLL_S
        while True:
            if self.done:
                return self
            if deadline is not None and time.monotonic() >= deadline:
                raise TaskTimeout(f"workflow {self.id} still running after {timeout} s")
            time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))
            interval = min(MAX_POLL_S, interval * 1.5)

    async def await_(self, timeout: float | None = 30.0) -> WorkflowRunHandle:
        """``wait`` for an event loop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = POLL_S
        while True:
            if await sync_to_async(lambda: self.done, thread_sensitive=True)():
                return self
            if deadline is not None and time.monotonic() >= deadline:
                raise TaskTimeout(f"workflow {self.id} still running after {timeout} s")
            await asyncio.sleep(interval)
            interval = min(MAX_POLL_S, interval * 1.5)

    def cancel(self) -> int:
        return cancel_workflow(self.id)

    def retry(self) -> int:
        return retry_workflow(self.id)


def get_workflow(run_id: str) -> WorkflowRunHandle:
    """The handle of run ``run_id``; ``WorkflowNotFound`` if there is none."""
    handle = WorkflowRunHandle(run_id)
    handle.row()
    return handle


def cancel_workflow(run_id: str) -> int:
    """Cancel a run: its held nodes end canceled, its running tasks are asked to cancel. Return the nodes touched.

    The run reads ``canceled`` from here on; it is finished once the tasks
    asked to cancel have ended (a handler that returns first still succeeds).
    """
    store = get_store()
    alias = store.alias
    with transaction.atomic(using=alias):
        updated = (
            WorkflowRun.objects.using(alias).filter(id=run_id, status=RunStatus.RUNNING).update(status=RunStatus.CANCELED)
        )
        if not updated and not WorkflowRun.objects.using(alias).filter(id=run_id).exists():
            raise WorkflowNotFound(run_id)
        nodes = WorkflowNode.objects.using(alias).filter(run_id=run_id)
        held = list(nodes.filter(state=NodeState.HELD).values_list("id", flat=True))
        live = [task_id for task_id in nodes.filter(state=NodeState.RELEASED).values_list("task_id", flat=True) if task_id]
        if live:
            store.cancel_many(live)
        if held:
            advance.end_held(alias, held, NodeState.CANCELED, "canceled: the workflow was canceled")
    return len(held) + len(live)


def retry_workflow(run_id: str) -> int:
    """Run an ended run's failed, canceled and skipped nodes again; return how many.

    Its succeeded nodes keep their results; each node run again waits for
    those of its parents that are run again too. ``WorkflowError`` while the
    run has nodes left, ``WorkflowNotFound`` for an unknown id.
    """
    alias = get_store().alias
    with transaction.atomic(using=alias):
        run = WorkflowRun.objects.using(alias).select_for_update().filter(id=run_id).first()
        if run is None:
            raise WorkflowNotFound(run_id)
        if run.nodes_left:
            raise WorkflowError(f"workflow {run_id} is still running ({run.nodes_left} nodes left)")
        if run.kind == advance.BATCH_KIND:
            # Its callbacks are chosen by the members' outcomes: retry the members' tasks instead.
            raise WorkflowError(f"{run_id} is a batch: retry its failed tasks with cairnq.retry(task_id)")
        again = list(
            WorkflowNode.objects.using(alias)
            .filter(run_id=run_id, state__in=[NodeState.FAILED, NodeState.CANCELED, NodeState.SKIPPED])
            .values_list("id", flat=True)
        )
        if not again:
            return 0
        chosen = set(again)
        waits_for = Counter(
            child
            for parent, child in WorkflowEdge.objects.using(alias)
            .filter(child_id__in=again)
            .values_list("parent_id", "child_id")
            if parent in chosen
        )
        for node_id in again:
            WorkflowNode.objects.using(alias).filter(id=node_id).update(
                state=NodeState.HELD, task_id=None, error="", ended_at_ms=None,
                parents_left=waits_for[node_id], parents_failed=0,
            )
        WorkflowRun.objects.using(alias).filter(id=run_id).update(
            status=RunStatus.RUNNING, nodes_left=len(again), nodes_failed=0, finished_at_ms=None
        )
        advance.release(alias, [node_id for node_id in again if waits_for[node_id] == 0])
    return len(again)


def parent_results(task_id: str) -> dict[str, Any]:
    """What the parents of the node whose task is ``task_id`` returned, by node name.

    A parent that did not succeed (skipped, failed with ``on_parent_failure="run"``) is left out.
    """
    alias = get_store().alias
    node = WorkflowNode.objects.using(alias).filter(task_id=task_id).values_list("id", flat=True).first()
    if node is None:
        return {}
    parent_ids = WorkflowEdge.objects.using(alias).filter(child_id=node).values_list("parent_id", flat=True)
    done = _succeeded_tasks(alias, WorkflowNode.objects.filter(id__in=list(parent_ids)))
    return {done[found]: result for found, result in _results_of(alias, list(done))}


def _succeeded_tasks(alias: str, nodes: Any) -> dict[str, str]:
    """Task id -> node name of the succeeded nodes among ``nodes`` (a queryset)."""
    found = nodes.using(alias).filter(state=NodeState.SUCCEEDED).values_list("task_id", "name")
    return {task_id: name for task_id, name in found if task_id}


def _results_of(alias: str, task_ids: list[str]) -> list[tuple[str, Any]]:
    # cairnq_django.models imports this package's models: imported here to keep the import graph acyclic.
    from ..models import Task

    if not task_ids:
        return []
    # The field decodes each result (an undecodable one arrives as ``Undecodable``).
    return list(Task.objects.using(alias).filter(id__in=task_ids).values_list("id", "result"))


__all__ = [
    "ENDED_STATES", "WorkflowNotFound", "WorkflowRunHandle", "cancel_workflow", "get_workflow", "parent_results",
    "retry_workflow",
]
