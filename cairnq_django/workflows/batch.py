"""``Batch``: tasks submitted inside ``with batch:`` are tracked together; callbacks run once all have ended.

    batch = cairnq.Batch(on_success=report.s(), on_finish=cleanup.s(), on_failure=alert.s())
    with batch:
        for row in rows:
            send.submit({"to": row.email})

A batch is a workflow run of kind ``batch`` (docs/workflows.md, "Batches").
Each member is a node released at once: the submit inserts its task and its
node in one transaction. The callbacks are held nodes with no edges: each
starts at one (the batch still open), a member's join adds to them, a
member's end or the close takes from them (``advance.py``), so a
member's end costs the same statements whatever the batch's size. A join
counts the run up only while it is running: once canceled, the batch
refuses members (docs/workflows.md, "Batches", "Cancel while the block is
open").
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from contextvars import Token
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.db import transaction

from ..client.schema_guard import needs_schema
from ..client.submit import build_spec
from ..protocol import bounds
from ..protocol.ids import ulid
from ..store import get_store
from . import advance
from .canvas import Signature
from .current import current_batch
from .graph import WorkflowError
from .models import NodeState, RunStatus, WorkflowNode, WorkflowRun
from .run import WorkflowRunHandle
from .submit import RUN_ID_PREFIX

if TYPE_CHECKING:
    from ..models import Task
    from ..store.base import Store, SubmitSpec

# A join adds its members to the run's counts and to its held callbacks', in the join's transaction.
# Only while the run is running: a join that finds it canceled rolls back what it wrote. The run's
# row, locked from here to the commit, orders a join and a cancel_workflow: the cancel waits for the
# join and then finds (and cancels) its members, or the join waits for the cancel and is refused.
_JOIN_RUN = """
UPDATE cairnq_django_workflow SET nodes_total = nodes_total + %(joined)s, nodes_left = nodes_left + %(joined)s
WHERE id = %(run_id)s AND status = 'running'
"""
_JOIN_CALLBACKS = """
UPDATE cairnq_django_workflow_node SET parents_left = parents_left + %(joined)s
WHERE run_id = %(run_id)s AND name IN ('on_success', 'on_failure', 'on_finish') AND state = 'held'
"""


class Batch:
    """Tasks submitted inside ``with batch:`` (or ``async with``), and what runs once all have ended.

    ``on_success`` runs if every member succeeded, ``on_failure`` if one
    failed or was canceled, ``on_finish`` either way: each once, after the
    batch closed (the block exited). An empty batch's ``on_success`` and
    ``on_finish`` run at its close. A batch is entered once. Once canceled
    (``cancel_workflow(batch.id)``) it runs no callback, and a submit inside
    the block raises ``WorkflowError``.
    """

    def __init__(
        self,
        name: str = "batch",
        *,
        on_success: Signature | None = None,
        on_failure: Signature | None = None,
        on_finish: Signature | None = None,
    ) -> None:
        bounds.check_text(name, "name")
        self.name = name
        self._callbacks: dict[str, SubmitSpec] = {}
        for node, step in zip(advance.BATCH_CALLBACKS, (on_success, on_failure, on_finish)):
            if step is None:
                continue
            if not isinstance(step, Signature):
                raise WorkflowError(f"{node}= takes a signature (task.s(payload)), not {step!r}")
            # Checked and encoded now, as Workflow.add does: a bad callback is refused before anything is written.
            self._callbacks[node] = build_spec(step.task, step.payload, **step.options)
        self.run: WorkflowRunHandle | None = None
        self._numbers = itertools.count(1)
        self._token: Token[Any] | None = None
        self._closed = False
        # Why a submit was refused (the batch was canceled): later submits are refused at once.
        self._refused: str | None = None

    @property
    def id(self) -> str | None:
        """The run's id once the batch was entered."""
        return None if self.run is None else self.run.id

    def __repr__(self) -> str:
        return f"<Batch {self.name!r} {self.id or '(not entered)'}>"

    # ---- open and close ---------------------------------------------------
    def __enter__(self) -> Batch:
        self._open()
        self._token = current_batch.set(self)
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        self._leave()
        self._close(failed=error is not None)

    async def __aenter__(self) -> Batch:
        await sync_to_async(self._open, thread_sensitive=True)()
        # Set here, in the caller's context: set in the worker thread it would not be seen.
        self._token = current_batch.set(self)
        return self

    async def __aexit__(self, kind: Any, error: Any, traceback: Any) -> None:
        self._leave()
        await sync_to_async(self._close, thread_sensitive=True)(failed=error is not None)

    def _leave(self) -> None:
        if self._token is not None:
            current_batch.reset(self._token)
            self._token = None

    @needs_schema
    def _open(self) -> None:
        """Write the run and its held callbacks (in the caller's transaction, if any)."""
        if self.run is not None:
            raise WorkflowError(f"batch {self.name!r} was entered already: make a new Batch")
        store = get_store()
        alias = store.alias
        now_ms = store.now_ms()
        callbacks = len(self._callbacks)
        with transaction.atomic(using=alias):
            # nodes_left counts one more than the nodes while open: the run cannot end before the close.
            run = WorkflowRun.objects.using(alias).create(
                id=RUN_ID_PREFIX + ulid(now_ms), name=self.name, kind=advance.BATCH_KIND,
                nodes_total=callbacks, nodes_left=callbacks + 1, created_at_ms=now_ms,
            )
            WorkflowNode.objects.using(alias).bulk_create(
                [WorkflowNode.of_spec(run.id, node, spec, parents_left=1) for node, spec in self._callbacks.items()]
            )
        self.run = WorkflowRunHandle(run.id)

    def _close(self, failed: bool = False) -> None:
        """Count the open batch down once: with every member ended, the callbacks are released here.

        After an exception in the block the batch still closes, so the
        members submitted before it are followed to their callbacks; unless
        the caller's transaction is already broken, when its rollback takes
        the batch with it.
        """
        if self.run is None or self._closed:
            return
        self._closed = True
        alias = get_store().alias
        if failed and transaction.get_connection(alias).needs_rollback:
            return
        advance.close_batch(alias, self.run.id)

    # ---- members ----------------------------------------------------------
    def insert(self, store: Store, specs: Iterable[SubmitSpec]) -> list[Task]:
        """Insert tasks as members (``client/submit.py`` calls this while the batch is open).

        Each task and its node in one transaction. A keyed submit that found
        an existing task returns it without making it a member: it may be
        another batch's, or none. Once the batch was canceled
        (``cancel_workflow``, from this process or any other) a submit raises
        ``WorkflowError`` and leaves nothing.
        """
        if self.run is None or self._closed:
            raise WorkflowError(f"batch {self.name!r} is not open")
        if self._refused is not None:
            # A canceled batch stays canceled (retry_workflow refuses batches): no need to write and roll back again.
            raise WorkflowError(self._refused)
        run_id = self.run.id
        names: list[str] = []
        marked = []
        for spec in specs:
            names.append(f"{spec.name}#{next(self._numbers)}")
            marked.append(
                replace(
                    spec,
                    metadata_json=advance.marked(spec.metadata_json, run_id, names[-1]),
                    correlation_id=spec.correlation_id or run_id,
                )
            )
        if not marked:
            return []
        alias = store.alias
        with transaction.atomic(using=alias):
            rows = [store.submit(marked[0])] if len(marked) == 1 else store.submit_many(marked)
            joined = [
                WorkflowNode.of_spec(run_id, name, spec, parents_left=0, state=NodeState.RELEASED, task_id=row.id)
                for name, spec, row in zip(names, marked, rows)
                if getattr(row, "cairnq_inserted", True)
            ]
            if joined:
                WorkflowNode.objects.using(alias).bulk_create(joined)
            params = {"run_id": run_id, "joined": len(joined)}
            with transaction.get_connection(alias).cursor() as cursor:
                # Last, so the run's row is locked only briefly: each member's end counts it down too.
                cursor.execute(_JOIN_RUN, params)
                if cursor.rowcount == 0:
                    self._refused = self._refusal(alias, run_id)
                    # Raised inside the atomic block: the tasks and nodes written above are rolled back.
                    raise WorkflowError(self._refused)
                if joined:
                    cursor.execute(_JOIN_CALLBACKS, params)
        return rows

    def _refusal(self, alias: str, run_id: str) -> str:
        """Why the run took no member: it was canceled (or, rarely, deleted) while the block was open."""
        status = WorkflowRun.objects.using(alias).filter(id=run_id).values_list("status", flat=True).first()
        if status == RunStatus.CANCELED:
            why = "was canceled (cairnq.cancel_workflow): it takes no more tasks"
        else:
            why = f"is {status}" if status else "is gone (its run was deleted)"
        return f"batch {self.name!r} ({run_id}) {why}; nothing was submitted"


__all__ = ["Batch"]
