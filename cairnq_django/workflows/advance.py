"""Advance a workflow when one of its nodes' tasks ends: exactly once, whoever ended it.

Two callers: the worker that settles a node's task does it in the
settlement's own transaction (``worker/settler.py``), and the sweeper pass
(``sweep``) finds nodes whose task another SDK's worker, an operator or a
purge ended. Both go through ``tasks_ended``, whose first statement moves
the node out of ``released`` only if it is still there: whichever comes
second finds nothing to do, so children are counted down once.

Fan-in counts down: the ends of a settlement are one ``UPDATE ...
parents_left - n`` over their children, whatever the number of parents
(docs/workflows.md). Each step of an advance is one statement for all the
nodes it moves (``sql/<dialect>/``, ``statements.py``). A batch's callbacks
have no edges: its members' ends count them down per run
(``_Advancer._count_runs_down``, ``batch.py``).
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
from . import statements
from .models import NodeState, ParentFailure, WorkflowNode

logger = logging.getLogger("cairnq_django.workflows")

# The key under the app's metadata namespace that marks a node's task (its run id).
WORKFLOW_KEY = "workflow"
# A node's task whose row is gone before its end was seen (purged early) ends the node as failed.
ROW_GONE = "the task's row was removed before its end was seen"

_TERMINAL = {"succeeded": NodeState.SUCCEEDED, "failed": NodeState.FAILED, "canceled": NodeState.CANCELED}
_FAILED_STATES = (NodeState.FAILED, NodeState.CANCELED)
_SKIPPED_BY_PARENT = "skipped: a parent failed or was canceled"
_CANCELED_BY_PARENT = "canceled: a parent failed or was canceled"

# A batch (``batch.py``) is a run of this kind; its callbacks are its held nodes of these names.
BATCH_KIND = "batch"
ON_SUCCESS, ON_FAILURE, ON_FINISH = "on_success", "on_failure", "on_finish"
BATCH_CALLBACKS = (ON_SUCCESS, ON_FAILURE, ON_FINISH)

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
    rows = [
        {"task_id": task_id, "state": NodeState.FAILED, "error": ROW_GONE}
        if status == "gone"
        else {"task_id": task_id, "state": _TERMINAL[status], "error": ""}
        for task_id, status in ended
        if status in _TERMINAL or status == "gone"
    ]
    if not rows:
        return 0
    with transaction.atomic(using=alias):
        advancer = _Advancer(alias)
        advancer.advance(statements.execute(alias, "end_released", rows))
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
    if not found:
        return 0
    try:
        return tasks_ended(alias, found)
    except Exception:  # noqa: BLE001 - one bad row must not hold the others back: one transaction each
        logger.warning("advancing %d stalled workflow nodes together failed; advancing one by one", len(found))
    done = 0
    for task_id, status in found:
        try:
            done += tasks_ended(alias, [(task_id, status)])
        except Exception:  # noqa: BLE001 - logged; the next pass tries again
            logger.exception("advancing the workflow of task %s failed", task_id)
    return done


def end_held(alias: str, node_ids: Sequence[int], state: str, error: str) -> int:
    """End held nodes (a canceled run's): their children count down as after a failure."""
    if not node_ids:
        return 0
    with transaction.atomic(using=alias):
        advancer = _Advancer(alias)
        advancer.advance(
            statements.execute(alias, "end_held", [{"id": node_id, "state": state, "error": error} for node_id in node_ids])
        )
        return advancer.ended


def close_batch(alias: str, run_id: str) -> None:
    """Close a batch: its close counts its run and its callbacks down as one more end would.

    Called once, by the ``Batch`` that opened it; with every member ended,
    this releases the callbacks (``_Advancer.advance``).
    """
    with transaction.atomic(using=alias):
        advancer = _Advancer(alias)
        advancer.runs[run_id] = [1, 0]
        advancer.advance([])


class _Advancer:
    """One transaction's advancement, a step at a time, each step one statement for all its nodes.

    The steps: count down the children of the nodes just ended; end those a
    failed parent cancels or skips (which ends more: the loop goes on);
    release the ready ones; count the runs down (and a batch's callbacks,
    which may skip some: more ends). A settlement of any number of nodes
    costs the same handful of statements; a failure early in a long chain
    costs one round of them per generation it cancels.
    """

    def __init__(self, alias: str) -> None:
        self.alias = alias
        # Per run: [nodes ended, of which failed], not yet counted into the run's row.
        self.runs: dict[str, list[int]] = {}
        self.ready: list[int] = []
        self.ended = 0

    def advance(self, ended: list[tuple[Any, ...]]) -> None:
        """Carry the ends in ``ended`` ((node id, run id, state, has children) rows) through, until nothing moves."""
        while ended or self.ready or self.runs:
            if ended:
                self._tally(ended)
                ended = self._count_children_down(ended)
                continue
            if self.ready:
                release(self.alias, self.ready)
                self.ready = []
            if self.runs:
                ended = self._count_runs_down()

    def _tally(self, ended: list[tuple[Any, ...]]) -> None:
        for _node_id, run_id, state, _has_children in ended:
            self.ended += 1
            counts = self.runs.setdefault(run_id, [0, 0])
            counts[0] += 1
            counts[1] += state in _FAILED_STATES

    def _count_children_down(self, ended: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Count down the children of ``ended``; note the ready ones; end the ones a failure cancels or skips."""
        parents = [
            {"id": node_id, "failed": int(state in _FAILED_STATES)}
            for node_id, _run, state, has_children in ended
            if has_children
        ]
        if not parents:
            return []
        closed = []
        for child_id, parents_left, parents_failed, policy in statements.execute(self.alias, "count_down", parents):
            if parents_left > 0:
                continue
            if parents_failed == 0 or policy == ParentFailure.RUN:
                self.ready.append(child_id)
            elif policy == ParentFailure.SKIP:
                closed.append({"id": child_id, "state": NodeState.SKIPPED, "error": _SKIPPED_BY_PARENT})
            else:
                closed.append({"id": child_id, "state": NodeState.CANCELED, "error": _CANCELED_BY_PARENT})
        return statements.execute(self.alias, "end_held", closed) if closed else []

    def _count_runs_down(self) -> list[tuple[Any, ...]]:
        """Count the runs down (finishing those with no node left) and the batches' callbacks; the callbacks skipped.

        A batch's callbacks reach zero when every member ended and the batch
        closed (its close counts as one end). Only held callbacks are
        counted: once released, their own ends find none.
        """
        counts = [{"run_id": run_id, "ended": ended, "failed": failed} for run_id, (ended, failed) in self.runs.items()]
        self.runs = {}
        finished = statements.execute(self.alias, "count_runs_down", counts, key="runs")
        batches = {run_id for run_id, _left, _failed, kind in finished if kind == BATCH_KIND}
        if not batches:
            return []
        callbacks = statements.execute(
            self.alias, "count_callbacks_down", [row for row in counts if row["run_id"] in batches], key="runs"
        )
        skipped = []
        for node_id, left, failed, name in callbacks:
            if left > 0:
                continue
            if name == ON_FINISH or (name == ON_SUCCESS) == (failed == 0):
                self.ready.append(node_id)
            else:
                error = "skipped: every member succeeded" if failed == 0 else "skipped: a member failed"
                skipped.append({"id": node_id, "state": NodeState.SKIPPED, "error": error})
        return statements.execute(self.alias, "end_held", skipped) if skipped else []


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
