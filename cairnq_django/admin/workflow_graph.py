"""Where a workflow's page draws each node and edge: a layered layout, computed without a browser.

A node's layer (its column, left to right) is the longest path to it from a
root, so every edge points rightwards and a node stands right of all its
parents. Within a column nodes are ordered by the mean row of their parents
(one barycentre pass, which untangles chains and fans cheaply), then by the
order they were given in. Everything is linear in nodes plus edges: a 10,000
node run (``workflows.graph.MAX_NODES``) lays out in milliseconds.

Pure geometry: ids in, boxes and edge paths in SVG user units out.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

BOX_WIDTH = 168
BOX_HEIGHT = 40
# Room between columns for the edges' curves, and between boxes of a column.
COLUMN_GAP = 56
ROW_GAP = 12
MARGIN = 8


@dataclass(frozen=True)
class Box:
    """One node's rectangle: ``x``, ``y`` its top-left corner."""

    node: Hashable
    layer: int
    row: int
    x: int
    y: int
    width: int = BOX_WIDTH
    height: int = BOX_HEIGHT


@dataclass(frozen=True)
class Line:
    """One edge: a cubic curve from the parent's right side to the child's left side."""

    parent: Hashable
    child: Hashable
    path: str


@dataclass
class GraphLayout:
    boxes: dict[Hashable, Box] = field(default_factory=dict)
    lines: list[Line] = field(default_factory=list)
    width: int = 0
    height: int = 0


def layers(nodes: Sequence[Hashable], edges: Iterable[tuple[Hashable, Hashable]]) -> dict[Hashable, int]:
    """Each node's longest path (in edges) from a root; an edge naming an unknown node is left out.

    The stored graph was checked acyclic at submit, but rows edited by hand
    might not be: nodes left on a cycle go one column right of the rest, so
    they are still drawn.
    """
    known = set(nodes)
    children: dict[Hashable, list[Hashable]] = {node: [] for node in nodes}
    waiting = dict.fromkeys(nodes, 0)
    for parent, child in edges:
        if parent in known and child in known and parent != child:
            children[parent].append(child)
            waiting[child] += 1
    layer = dict.fromkeys(nodes, 0)
    ready = [node for node in nodes if waiting[node] == 0]
    placed = 0
    while ready:
        current = ready.pop()
        placed += 1
        for child in children[current]:
            layer[child] = max(layer[child], layer[current] + 1)
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if placed < len(layer):
        beyond = max((layer[node] for node in nodes if waiting[node] == 0), default=-1) + 1
        for node in nodes:
            if waiting[node]:
                layer[node] = beyond
    return layer


def layout(nodes: Sequence[Hashable], edges: Iterable[tuple[Hashable, Hashable]]) -> GraphLayout:
    """Boxes and edge curves for ``nodes`` (in their given order) joined by ``(parent, child)`` edges."""
    pairs = list(edges)
    layer_of = layers(nodes, pairs)
    known = set(layer_of)
    parents: dict[Hashable, list[Hashable]] = {node: [] for node in nodes}
    for parent, child in pairs:
        if parent in known and child in known and parent != child:
            parents[child].append(parent)

    columns: dict[int, list[Hashable]] = {}
    for node in nodes:
        columns.setdefault(layer_of[node], []).append(node)
    row_of: dict[Hashable, float] = {}
    for number in sorted(columns):
        column = columns[number]
        given = {node: index for index, node in enumerate(column)}

        def mean_parent_row(node: Hashable) -> tuple[float, int]:
            # Parents sit in earlier columns, already placed; a root keeps its given place.
            rows = [row_of[parent] for parent in parents[node] if parent in row_of]
            return (sum(rows) / len(rows) if rows else given[node], given[node])

        column.sort(key=mean_parent_row)
        for row, node in enumerate(column):
            row_of[node] = row

    result = GraphLayout()
    for number, column in columns.items():
        x = MARGIN + number * (BOX_WIDTH + COLUMN_GAP)
        for row, node in enumerate(column):
            result.boxes[node] = Box(node, number, row, x, MARGIN + row * (BOX_HEIGHT + ROW_GAP))
    for parent, child in pairs:
        if parent in result.boxes and child in result.boxes and parent != child:
            result.lines.append(Line(parent, child, _curve(result.boxes[parent], result.boxes[child])))
    tallest = max((len(column) for column in columns.values()), default=0)
    spanned = max(columns, default=-1) + 1
    result.width = 2 * MARGIN + spanned * (BOX_WIDTH + COLUMN_GAP) - (COLUMN_GAP if spanned else 0)
    result.height = 2 * MARGIN + tallest * (BOX_HEIGHT + ROW_GAP) - (ROW_GAP if tallest else 0)
    return result


def _curve(parent: Box, child: Box) -> str:
    """An S-curve whose ends leave and enter horizontally, bending in the gap before the child's column."""
    x1, y1 = parent.x + parent.width, parent.y + parent.height // 2
    x2, y2 = child.x, child.y + child.height // 2
    bend = COLUMN_GAP // 2
    return f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}"
