"""``Workflow``: a named DAG of tasks, submitted in one transaction.

    wf = cairnq.Workflow("onboard", key="onboard:42")
    a = wf.add("fetch", fetch, {"url": u})
    b = wf.add("parse", parse, after=[a])
    run = wf.submit()

Each node's submit arguments are checked and encoded by ``add`` (as
``cairnq.submit`` checks them), the graph by ``submit``: a refused workflow
writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async

from ..client import declared
from ..client.submit import build_spec
from ..tasks.unknown import judge
from ..protocol import bounds
from .graph import NodeSpec, WorkflowError
from .run import WorkflowRunHandle
from .models import ParentFailure
from .submit import submit_workflow


@dataclass(frozen=True)
class NodeHandle:
    """What ``Workflow.add`` returns: a node to name in a later node's ``after``."""

    name: str
    workflow: Workflow

    def __str__(self) -> str:
        return self.name


def task_name_of(task: Any) -> str:
    """The registered name of ``task``: a ``@cairnq.task`` handler, its definition, or a name."""
    if isinstance(task, str):
        return task
    definition = getattr(task, "cairnq_definition", None) or getattr(task, "definition", None)
    name = getattr(definition, "name", None) or getattr(task, "name", None)
    if isinstance(name, str):
        return name
    raise WorkflowError(f"{task!r} is not a task: pass a @cairnq.task handler or a task name")


class Workflow:
    """A DAG of nodes (tasks) to submit as one run; see the module docstring."""

    kind = "workflow"

    def __init__(self, name: str, *, key: str | None = None) -> None:
        bounds.check_text(name, "name")
        if key is not None:
            bounds.check_text(key, "key")
        self.name = name
        self.key = key
        self._nodes: list[NodeSpec] = []
        self._names: set[str] = set()

    def add(
        self,
        name: str,
        task: Any,
        payload: dict[str, Any] | None = None,
        *,
        after: Iterable[NodeHandle | str] = (),
        on_parent_failure: str = ParentFailure.CANCEL,
        queue: str = declared.QUEUE,
        priority: int = declared.PRIORITY,
        max_attempts: int = declared.MAX_ATTEMPTS,
        delay_ms: int = 0,
        metadata: dict[str, Any] | None = None,
    ) -> NodeHandle:
        """Add node ``name`` running ``task`` with ``payload`` once every node of ``after`` has ended.

        ``after`` takes handles or node names (a name may be added later).
        ``on_parent_failure``: ``"cancel"`` (default), ``"skip"`` or ``"run"``.
        Raises ``WorkflowError`` (a ``ValueError``) for a duplicate name, a
        parent of another workflow or a bad policy, and what ``cairnq.submit``
        raises for bad submit arguments; the workflow is left unchanged.
        """
        if not isinstance(name, str) or not name:
            raise WorkflowError(f"a node's name must be a non-empty string, not {name!r}")
        if name in self._names:
            raise WorkflowError(f"workflow {self.name!r} already has a node named {name!r}")
        if on_parent_failure not in ParentFailure.values:
            raise WorkflowError(
                f"on_parent_failure must be one of {', '.join(ParentFailure.values)}, not {on_parent_failure!r}"
            )
        parents = [self._parent_name(parent, name) for parent in after]
        task_name = task_name_of(task)
        # The rule cairnq.submit applies to a name no app declares (UNKNOWN_TASKS, FOREIGN_TASKS).
        judge(task_name)
        spec = build_spec(
            task_name,
            payload,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            delay_ms=delay_ms,
            metadata=metadata,
        )
        self._nodes.append(NodeSpec(name, spec, parents, str(on_parent_failure), owner=self))
        self._names.add(name)
        return NodeHandle(name, self)

    def _parent_name(self, parent: NodeHandle | str, child: str) -> str:
        if isinstance(parent, NodeHandle):
            if parent.workflow is not self:
                raise WorkflowError(
                    f"node {child!r} runs after {parent.name!r} of workflow {parent.workflow.name!r}, not of this one"
                )
            return parent.name
        if isinstance(parent, str):
            return parent
        raise WorkflowError(f"after= takes node handles or names, not {parent!r}")

    @property
    def nodes(self) -> list[NodeSpec]:
        return list(self._nodes)

    def submit(self) -> WorkflowRunHandle:
        """Write the run and release its first nodes, in one transaction; return its ``WorkflowRunHandle``."""
        return submit_workflow(self)

    async def asubmit(self) -> WorkflowRunHandle:
        return await sync_to_async(self.submit, thread_sensitive=True)()

    def __repr__(self) -> str:
        return f"<Workflow {self.name!r}: {len(self._nodes)} nodes>"
