"""Advance a workflow when one of its nodes' tasks ends: exactly once, whoever ended it.

Two callers: the worker that settles a node's task does it in the
settlement's own transaction (``worker/settler.py``), and the sweeper pass
(``sweep``) finds nodes whose task another SDK's worker, an operator or a
purge ended. Both go through ``tasks_ended``, whose first statement moves
the node out of ``released`` only if it is still there: whichever comes
second finds nothing to do, so children are counted down once.

Fan-in counts down: a parent's end is one ``UPDATE ... parents_left - 1``
over its children, whatever their number of parents (docs/workflows.md).
A batch's callbacks have no edges: its members' ends count them down per
run, in ``finish`` (``batch.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connections, transaction

from ..protocol.limits import METADATA_NAMESPACE
from ..store import get_store
from ..store.base import SubmitSpec
from .models import NodeState, ParentFailure, RunStatus, WorkflowNode

logger = logging.getLogger("cairnq_django.workflows")

# The key under the app's metadata namespace that marks a node's task (its run id).
WORKFLOW_KEY = "workflow"
# A node's task whose row is gone before its end was seen (purged early) ends the node as failed.
ROW_GONE = "the task's row was removed before its end was seen"

_TERMINAL = {"succeeded": NodeState.SUCCEEDED, "failed": NodeState.FAILED, "canceled": NodeState.CANCELED}
_FAILED_STATES = (NodeState.FAILED, NodeState.CANCELED)

# A batch (``batch.py``) is a run of this kind; its callbacks are its held nodes of these names.
BATCH_KIND = "batch"
ON_SUCCESS, ON_FAILURE, ON_FINISH = "on_success", "on_failure", "on_finish"
BATCH_CALLBACKS = (ON_SUCCESS, ON_FAILURE, ON_FINISH)

_END_RELEASED = """
UPDATE cairnq_django_workflow_node SET state = %(state)s, error = %(error)s, ended_at_ms = %(now_ms)s
WHERE task_id = %(task_id)s AND state = 'released'
RETURNING id, run_id
"""
_END_HELD = """
UPDATE cairnq_django_workflow_node SET state = %(state)s, error = %(error)s, ended_at_ms = %(now_ms)s
WHERE id = %(node_id)s AND state = 'held'
RETURNING id, run_id
"""
# One statement per ended parent, however many children it has.
_COUNT_DOWN = """
UPDATE cairnq_django_workflow_node
SET parents_left = parents_left - 1, parents_failed = parents_failed + %(failed)s
WHERE id IN (SELECT child_id FROM cairnq_django_workflow_edge WHERE parent_id = %(node_id)s) AND state = 'held'
RETURNING id, parents_left, parents_failed, on_parent_failure
"""
_RUN_COUNT_DOWN = """
UPDATE cairnq_django_workflow SET nodes_left = nodes_left - %(ended)s, nodes_failed = nodes_failed + %(failed)s
WHERE id = %(run_id)s
RETURNING nodes_left, nodes_failed, kind
"""
# A batch's callbacks wait for every member and for the batch to close: each
# such end (``ended`` of them) counts them down at once, by the run's unique
# (run, name) index, however many members the batch has.
_BATCH_COUNT_DOWN = """
UPDATE cairnq_django_workflow_node
SET parents_left = parents_left - %(ended)s, parents_failed = parents_failed + %(failed)s
WHERE run_id = %(run_id)s AND name IN ('on_success', 'on_failure', 'on_finish') AND state = 'held'
RETURNING id, parents_left, parents_failed, name
"""
_RUN_FINISH = """
UPDATE cairnq_django_workflow SET status = %(status)s, finished_at_ms = %(now_ms)s
WHERE id = %(run_id)s AND status = 'running'
"""
_RUN_FINISHED_AT = """
UPDATE cairnq_django_workflow SET finished_at_ms = %(now_ms)s WHERE id = %(run_id)s AND finished_at_ms IS NULL
"""
_ANY_RELEASED = "SELECT 1 FROM cairnq_django_workflow_node WHERE state = 'released' LIMIT 1"
# Released nodes whose task row ended or is gone: what the events missed.
_STALLED = """
SELECT n.task_id, t.status
FROM cairnq_django_workflow_node n LEFT JOIN cairnq_tasks t ON t.id = n.task_id
WHERE n.state = 'released' AND (t.id IS NULL OR t.status IN ('succeeded', 'failed', 'canceled'))
ORDER BY n.id
LIMIT %(limit)s
"""


def node_marker(run_id: str, node_name: str) -> dict[str, Any]:
    """What a node's task carries in its metadata, under the app's namespace."""
    return {WORKFLOW_KEY: run_id, "node": node_name}


def is_node_task(metadata: Any) -> bool:
    """Whether a task's (decoded) metadata marks it as a workflow node's."""
    own = metadata.get(METADATA_NAMESPACE) if isinstance(metadata, dict) else None
    return isinstance(own, dict) and WORKFLOW_KEY in own


def tasks_ended(alias: str, ended: Iterable[tuple[str, str]]) -> int:
    """Advance the workflows of the tasks in ``ended`` ((task id, terminal status) each); return nodes ended.

    Runs in the caller's transaction (the settlement's) when there is one,
    else in one of its own. Tasks of no workflow, or already advanced, are
    passed over.
    """
    pairs = [(task_id, status) for task_id, status in ended if status in _TERMINAL or status == "gone"]
    if not pairs:
        return 0
    with transaction.atomic(using=alias):
        advancer = _Advancer(alias)
        for task_id, status in pairs:
            if status == "gone":
                advancer.end_released(task_id, NodeState.FAILED, ROW_GONE)
            else:
                advancer.end_released(task_id, _TERMINAL[status], "")
        advancer.finish()
        return advancer.ended


def sweep(alias: str, limit: int = 1_000) -> int:
    """Advance the nodes whose task ended unseen (another SDK's worker, an operator, a purge); return how many."""
    with connections[alias].cursor() as cursor:
        # Most passes find no node released at all: then the tasks table is not read.
        cursor.execute(_ANY_RELEASED)
        if cursor.fetchone() is None:
            return 0
        cursor.execute(_STALLED, {"limit": limit})
        found = [(task_id, status or "gone") for task_id, status in cursor.fetchall()]
    done = 0
    for task_id, status in found:
        # One transaction a node: one that fails (a bad row) leaves the others advanced.
        try:
            done += tasks_ended(alias, [(task_id, status)])
        except Exception:  # noqa: BLE001 - logged; the next pass tries again
            logger.exception("advancing the workflow of task %s failed", task_id)
    return done


def end_held(alias: str, node_ids: Sequence[int], state: str, error: str) -> int:
    """End held nodes (a canceled run's): their children count down as after a failure."""
    with transaction.atomic(using=alias):
        advancer = _Advancer(alias)
        for node_id in node_ids:
            advancer.end_held(node_id, state, error)
        advancer.finish()
        return advancer.ended


def close_batch(alias: str, run_id: str) -> None:
    """Close a batch: its close counts its run and its callbacks down as one more end would.

    Called once, by the ``Batch`` that opened it; with every member ended,
    this releases the callbacks (``_Advancer.finish``).
    """
    with transaction.atomic(using=alias):
        advancer = _Advancer(alias)
        advancer.runs[run_id] = [1, 0]
        advancer.finish()


class _Advancer:
    """One transaction's advancement: ends nodes, counts their children down, releases the ready ones."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.store = get_store()
        self.now_ms = self.store.now_ms()
        # Per run: [nodes ended, of which failed].
        self.runs: dict[str, list[int]] = {}
        self.ready: list[int] = []
        self.ended = 0

    def _execute(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        with connections[self.alias].cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def end_released(self, task_id: str, state: str, error: str) -> None:
        params = {"task_id": task_id, "state": state, "error": error, "now_ms": self.now_ms}
        self._count_down(self._execute(_END_RELEASED, params), state)

    def end_held(self, node_id: int, state: str, error: str) -> None:
        params = {"node_id": node_id, "state": state, "error": error, "now_ms": self.now_ms}
        self._count_down(self._execute(_END_HELD, params), state)

    def _count_down(self, ended: list[tuple[Any, ...]], state: str) -> None:
        """Count down the children of the nodes just ended, and of those their end ends in turn.

        A loop, not recursion: a failure early in a long chain cancels every node after it.
        """
        todo = [(node_id, run_id, state) for node_id, run_id in ended]
        while todo:
            node_id, run_id, state = todo.pop()
            self.ended += 1
            counts = self.runs.setdefault(run_id, [0, 0])
            counts[0] += 1
            failed = state in _FAILED_STATES
            counts[1] += failed
            for child_id, parents_left, parents_failed, policy in self._execute(
                _COUNT_DOWN, {"node_id": node_id, "failed": 1 if failed else 0}
            ):
                if parents_left > 0:
                    continue
                if parents_failed == 0 or policy == ParentFailure.RUN:
                    self.ready.append(child_id)
                    continue
                if policy == ParentFailure.SKIP:
                    child_state, error = NodeState.SKIPPED, "skipped: a parent failed or was canceled"
                else:
                    child_state, error = NodeState.CANCELED, "canceled: a parent failed or was canceled"
                params = {"node_id": child_id, "state": child_state, "error": error, "now_ms": self.now_ms}
                todo.extend((found, run, child_state) for found, run in self._execute(_END_HELD, params))

    def finish(self) -> None:
        """Release the nodes made ready, then count the runs down (ending those with no node left).

        A loop: counting a batch down may make its callbacks ready, or skip
        them, which counts the run down once more.
        """
        while self.ready or self.runs:
            if self.ready:
                release(self.alias, self.ready)
                self.ready = []
            runs, self.runs = self.runs, {}
            for run_id, (ended, failed) in runs.items():
                params = {"run_id": run_id, "ended": ended, "failed": failed}
                [(left, failed_total, kind)] = self._execute(_RUN_COUNT_DOWN, params)
                if kind == BATCH_KIND:
                    self._count_down_callbacks(params)
                if left == 0:
                    status = RunStatus.FAILED if failed_total else RunStatus.SUCCEEDED
                    self._execute(_RUN_FINISH, {"run_id": run_id, "status": status, "now_ms": self.now_ms})
                    self._execute(_RUN_FINISHED_AT, {"run_id": run_id, "now_ms": self.now_ms})

    def _count_down_callbacks(self, params: dict[str, Any]) -> None:
        """Count a batch's held callbacks down; at zero, make ready those the outcome calls for, skip the others.

        Zero means every member ended and the batch closed (its close counts
        as one end). Only held callbacks are counted: once released, their
        own ends find none.
        """
        for node_id, left, failed, name in self._execute(_BATCH_COUNT_DOWN, params):
            if left > 0:
                continue
            if name == ON_FINISH or (name == ON_SUCCESS) == (failed == 0):
                self.ready.append(node_id)
                continue
            skip = {"node_id": node_id, "state": NodeState.SKIPPED, "now_ms": self.now_ms,
                    "error": "skipped: every member succeeded" if failed == 0 else "skipped: a member failed"}
            self._count_down(self._execute(_END_HELD, skip), NodeState.SKIPPED)


def release(alias: str, node_ids: Sequence[int]) -> None:
    """Insert the task rows of held nodes, in the caller's transaction, and mark them released."""

    nodes = list(WorkflowNode.objects.using(alias).filter(id__in=node_ids, state=NodeState.HELD).order_by("id"))
    if not nodes:
        return
    specs = [
        SubmitSpec(
            name=node.task_name,
            payload_json=node.payload_json,
            queue=node.queue,
            priority=node.priority,
            max_attempts=node.max_attempts,
            delay_ms=node.delay_ms,
            metadata_json=marked(node.metadata_json, node.run_id, node.name),
            correlation_id=node.run_id,
        )
        for node in nodes
    ]
    rows = get_store().submit_many(specs)
    for node, row in zip(nodes, rows):
        node.task_id = row.id
        node.state = NodeState.RELEASED
    WorkflowNode.objects.using(alias).bulk_update(nodes, ["task_id", "state"])


def marked(metadata_json: str, run_id: str, node_name: str) -> str:
    """The task's metadata (JSON) with the node's marker added under the app's namespace."""
    metadata = json.loads(metadata_json) if metadata_json else {}
    if not isinstance(metadata, dict):
        metadata = {}
    own = metadata.get(METADATA_NAMESPACE)
    metadata[METADATA_NAMESPACE] = {**(own if isinstance(own, dict) else {}), **node_marker(run_id, node_name)}
    return json.dumps(metadata, separators=(",", ":"), ensure_ascii=False)
