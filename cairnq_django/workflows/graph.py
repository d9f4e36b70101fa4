"""Build and check a workflow's graph before anything is written.

``Workflow.add`` collects ``NodeSpec``s; ``checked`` refuses a bad graph
with an error that names what is wrong (a cycle, a duplicate or unknown
node name, a parent of another workflow, a graph over the size limit), so
a refused submit writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..store.base import SubmitSpec
from .models import ParentFailure

# Nodes one workflow may hold: its submit is one transaction, and the admin
# draws the whole graph on one page.
MAX_NODES = 20_000
# Parents one node may name (a chord's callback has one per header task).
MAX_PARENTS = MAX_NODES


class WorkflowError(ValueError):
    """A workflow that cannot be submitted as given; nothing was written."""


@dataclass
class NodeSpec:
    """One node as added: its name, its task's submit arguments, its parents by name."""

    name: str
    spec: SubmitSpec
    parents: list[str] = field(default_factory=list)
    on_parent_failure: str = ParentFailure.CANCEL
    # The Workflow object that made it: a handle from another workflow is refused.
    owner: object = None


def checked(name: str, nodes: Sequence[NodeSpec]) -> list[NodeSpec]:
    """``nodes`` in an order where every parent comes before its children; raise ``WorkflowError`` if bad."""
    if not nodes:
        raise WorkflowError(f"workflow {name!r} has no nodes")
    if len(nodes) > MAX_NODES:
        raise WorkflowError(f"workflow {name!r} has {len(nodes)} nodes; at most {MAX_NODES} are allowed")
    by_name: dict[str, NodeSpec] = {}
    for node in nodes:
        if node.name in by_name:
            raise WorkflowError(f"workflow {name!r} has two nodes named {node.name!r}")
        by_name[node.name] = node
    for node in nodes:
        if len(node.parents) > MAX_PARENTS:
            raise WorkflowError(f"node {node.name!r} has {len(node.parents)} parents; at most {MAX_PARENTS}")
        if len(set(node.parents)) != len(node.parents):
            raise WorkflowError(f"node {node.name!r} names a parent twice")
        for parent in node.parents:
            if parent not in by_name:
                raise WorkflowError(f"node {node.name!r} runs after {parent!r}, which workflow {name!r} has no node of")
            if parent == node.name:
                raise WorkflowError(f"node {node.name!r} runs after itself: a cycle")
    return _in_order(by_name)


def _in_order(by_name: dict[str, NodeSpec]) -> list[NodeSpec]:
    """Kahn's order over the nodes; a node left over lies on a cycle, which the error names."""
    children: dict[str, list[str]] = {node: [] for node in by_name}
    waiting = {node.name: len(node.parents) for node in by_name.values()}
    for node in by_name.values():
        for parent in node.parents:
            children[parent].append(node.name)
    ready = [name for name, count in waiting.items() if count == 0]
    order: list[NodeSpec] = []
    while ready:
        current = ready.pop()
        order.append(by_name[current])
        for child in children[current]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if len(order) < len(by_name):
        left = {name for name, count in waiting.items() if count > 0}
        raise WorkflowError("the workflow has a cycle: " + " -> ".join(_a_cycle(by_name, left)))
    return order


def _a_cycle(by_name: dict[str, NodeSpec], left: set[str]) -> list[str]:
    """One cycle among the nodes ``left`` (each has a parent among them), as names in order, closed."""
    # Walk parent links from any such node: within len(left) steps a name repeats.
    current = min(left)
    seen: list[str] = []
    while current not in seen:
        seen.append(current)
        current = next(parent for parent in by_name[current].parents if parent in left)
    cycle = seen[seen.index(current):]
    cycle.reverse()  # parent before child, as the edges run
    first = cycle.index(min(cycle))  # from its smallest name, so the message is the same every time
    cycle = cycle[first:] + cycle[:first]
    return [*cycle, cycle[0]]
