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
from django.db import OperationalError, transaction

from ..exceptions import TaskTimeout
from ..store import get_store
from . import advance
from .graph import WorkflowError
from .models import ENDED_STATES, NodeState, RunStatus, WorkflowEdge, WorkflowNode, WorkflowRun

POLL_S = 0.05
MAX_POLL_S = 0.5
# Results are read this many task ids a query: a batch callback's parents are all its members.
RESULTS_CHUNK = 1_000
# Tries of cancel_workflow when PostgreSQL ends it as a deadlock's victim.
CANCEL_ATTEMPTS = 3


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
    A batch runs none of its callbacks after it (held ones end canceled,
    released ones are canceled as tasks) and, while still open, refuses new
    members: its run's status is changed first, under the row lock a member's
    join takes, so a join either committed before (its task is canceled here)
    or is refused after.

    It locks the run, then its tasks; a worker settling one of them locks the
    task, then the run. When the two meet, PostgreSQL ends one of them as a
    deadlock; a cancel in a transaction of its own then starts over (the
    worker's settlement retries as after any lost connection).
    """
    alias = get_store().alias
    for attempt in range(1, CANCEL_ATTEMPTS + 1):
        try:
            return _cancel(run_id)
        except OperationalError as exc:
            if attempt == CANCEL_ATTEMPTS or transaction.get_connection(alias).in_atomic_block or not _deadlock(exc):
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


def _deadlock(exc: OperationalError) -> bool:
    """Whether PostgreSQL ended the statement as a deadlock's victim (SQLSTATE 40P01; psycopg 3 or 2)."""
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) == "40P01" or getattr(cause, "pgcode", None) == "40P01"


def _cancel(run_id: str) -> int:
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
    A batch's callback has no edges: its parents are the batch's members (``<task>#<n>``).
    Two queries and one per ``RESULTS_CHUNK`` parents that succeeded, whatever their number.
    """
    alias = get_store().alias
    found = (
        WorkflowNode.objects.using(alias)
        .filter(task_id=task_id)
        .values_list("id", "run_id", "name", "run__kind")
        .first()
    )
    if found is None:
        return {}
    node_id, run_id, name, kind = found
    if kind == advance.BATCH_KIND and name in advance.BATCH_CALLBACKS:
        # Every node of the run but the callbacks: on_finish must not see on_success's result.
        parents = WorkflowNode.objects.filter(run_id=run_id).exclude(name__in=advance.BATCH_CALLBACKS)
    else:
        # A subquery, not a list of ids: a chord's callback may have 10,000 parents.
        parent_ids = WorkflowEdge.objects.using(alias).filter(child_id=node_id).values("parent_id")
        parents = WorkflowNode.objects.filter(id__in=parent_ids)
    done = _succeeded_tasks(alias, parents)
    return {done[parent_task]: result for parent_task, result in _results_of(alias, list(done))}


def _succeeded_tasks(alias: str, nodes: Any) -> dict[str, str]:
    """Task id -> node name of the succeeded nodes among ``nodes`` (a queryset)."""
    found = nodes.using(alias).filter(state=NodeState.SUCCEEDED).values_list("task_id", "name")
    return {task_id: name for task_id, name in found if task_id}


def _results_of(alias: str, task_ids: list[str]) -> list[tuple[str, Any]]:
    # cairnq_django.models imports this package's models: imported here to keep the import graph acyclic.
    from ..models import Task

    found: list[tuple[str, Any]] = []
    # In chunks: an IN list of every member of a large batch could pass SQLite's limit on parameters.
    for start in range(0, len(task_ids), RESULTS_CHUNK):
        chunk = task_ids[start : start + RESULTS_CHUNK]
        # The field decodes each result (an undecodable one arrives as ``Undecodable``).
        found.extend(Task.objects.using(alias).filter(id__in=chunk).values_list("id", "result"))
    return found


__all__ = [
    "ENDED_STATES", "WorkflowNotFound", "WorkflowRunHandle", "cancel_workflow", "get_workflow", "parent_results",
    "retry_workflow",
]
