"""Write a workflow run: the run, its nodes and edges, and its first tasks, in one transaction.

Inside the caller's ``transaction.atomic()`` on ``CAIRNQ["DATABASE"]`` the
run is part of that transaction. A key in use returns the run that holds it
and writes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction

from ..client.schema_guard import needs_schema
from ..protocol.ids import ulid
from ..store import get_store
from .advance import release
from .graph import checked
from .models import WorkflowEdge, WorkflowNode, WorkflowRun
from .run import WorkflowRunHandle

if TYPE_CHECKING:
    from .workflow import Workflow

RUN_ID_PREFIX = "wf_"


@needs_schema
def submit_workflow(workflow: Workflow) -> WorkflowRunHandle:
    order = checked(workflow.name, workflow.nodes)
    store = get_store()
    alias = store.alias
    if workflow.key is not None:
        existing = WorkflowRun.objects.using(alias).filter(key=workflow.key).values_list("id", flat=True).first()
        if existing is not None:
            return WorkflowRunHandle(existing)
    try:
        with transaction.atomic(using=alias):
            return _write(workflow, order, alias, store.now_ms())
    except IntegrityError:
        # Another submit of the same key committed first: that run is the one.
        if workflow.key is None:
            raise
        found = WorkflowRun.objects.using(alias).filter(key=workflow.key).values_list("id", flat=True).first()
        if found is None:
            raise
        return WorkflowRunHandle(found)


def _write(workflow: Workflow, order: list, alias: str, now_ms: int) -> WorkflowRunHandle:
    run = WorkflowRun.objects.using(alias).create(
        id=RUN_ID_PREFIX + ulid(now_ms),
        name=workflow.name,
        key=workflow.key,
        kind=workflow.kind,
        nodes_total=len(order),
        nodes_left=len(order),
        created_at_ms=now_ms,
    )
    nodes = WorkflowNode.objects.using(alias).bulk_create(
        [
            WorkflowNode.of_spec(
                run.id, node.name, node.spec, parents_left=len(node.parents), on_parent_failure=node.on_parent_failure
            )
            for node in order
        ]
    )
    ids = {node.name: node.id for node in nodes}
    WorkflowEdge.objects.using(alias).bulk_create(
        [
            WorkflowEdge(run=run, parent_id=ids[parent], child_id=ids[node.name])
            for node in order
            for parent in node.parents
        ]
    )
    release(alias, [ids[node.name] for node in order if not node.parents])
    return WorkflowRunHandle(run.id)
