"""A workflow's graph as inline SVG markup: one box per node, coloured by its state, and the edges.

Drawn on the server from ``workflow_graph``'s geometry, so the page needs no
script and no library from elsewhere. A box whose node has a task is a link
to the task's page; its ``<title>`` (a pointer's hover) names the node, its
task, its state and its error. Built with ``escape`` and one join rather
than a template per node: a 10,000-node page stays a few milliseconds of
string work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from ..workflows.models import NodeState
from .workflow_graph import GraphLayout, layout

# Characters of a node's name that fit its box at the stylesheet's font size.
NAME_CHARS = 22
# A hover text is not a document viewer.
TITLE_ERROR_CHARS = 300


@dataclass(frozen=True)
class DrawnNode:
    """What the drawing needs of a node row."""

    id: int
    name: str
    state: str
    task_name: str
    task_id: str | None
    error: str


def state_label(state: str) -> str:
    return str(NodeState(state).label) if state in NodeState.values else state


def graph_svg(
    nodes: Sequence[DrawnNode], edges: Iterable[tuple[int, int]], task_url: Callable[[str], str]
) -> SafeString:
    """The graph's ``<svg>``; ``task_url(task_id)`` gives the link of a node that has a task."""
    geometry: GraphLayout = layout([node.id for node in nodes], edges)
    parts = [
        f'<svg class="cairnq-wf-svg" xmlns="http://www.w3.org/2000/svg" width="{geometry.width}" '
        f'height="{geometry.height}" viewBox="0 0 {geometry.width} {geometry.height}" role="img" '
        f'aria-label="{escape(_summary(nodes))}">',
        # The arrowhead every edge ends in (the stylesheet sets it on the edges' paths).
        '<defs><marker id="cairnq-wf-arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
        'orient="auto"><polygon points="0,0 8,4 0,8"/></marker></defs>',
        '<g class="cairnq-wf-edges">',
    ]
    parts.extend(f'<path d="{line.path}"/>' for line in geometry.lines)
    parts.append('</g><g class="cairnq-wf-nodes">')
    for node in nodes:
        box = geometry.boxes[node.id]
        title = f"{node.name} · {state_label(node.state)} · {node.task_name}"
        if node.error:
            title += f" · {Truncator(node.error).chars(TITLE_ERROR_CHARS)}"
        # A node name is the caller's own text: escaped like every value here.
        body = (
            f"<title>{escape(title)}</title>"
            f'<rect x="{box.x}" y="{box.y}" width="{box.width}" height="{box.height}" rx="4"/>'
            f'<text class="cairnq-wf-name" x="{box.x + 8}" y="{box.y + 16}">'
            f"{escape(Truncator(node.name).chars(NAME_CHARS))}</text>"
            f'<text class="cairnq-wf-state" x="{box.x + 8}" y="{box.y + 32}">{escape(state_label(node.state))}</text>'
        )
        css = f"cairnq-wf-node cairnq-wf-node--{escape(node.state)}"
        if node.task_id:
            parts.append(
                f'<a class="{css}" href="{escape(task_url(node.task_id))}" data-node="{escape(node.name)}">{body}</a>'
            )
        else:
            parts.append(f'<g class="{css}" data-node="{escape(node.name)}">{body}</g>')
    parts.append("</g></svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every value above went through escape()


def _summary(nodes: Sequence[DrawnNode]) -> str:
    """What a screen reader hears for the picture: how many nodes, how many in each state."""
    counts = state_counts(nodes)
    return f"{len(nodes)} nodes: " + ", ".join(f"{count} {state_label(state)}" for state, count in counts)


def state_counts(nodes: Sequence[DrawnNode]) -> list[tuple[str, int]]:
    """(state, nodes in it) for the states present, in the order a node passes through them."""
    found: dict[str, int] = {}
    for node in nodes:
        found[node.state] = found.get(node.state, 0) + 1
    order = {state: index for index, state in enumerate(NodeState.values)}
    return sorted(found.items(), key=lambda item: order.get(item[0], len(order)))
