"""The workflow page's layout (``admin/workflow_graph.py``): layers, order within a layer, geometry.

Pins: a node drawn left of (or in the column of) one of its parents; a
layer that is not the longest path from a root (a diamond's shortcut edge
pulling its child leftwards); two boxes on top of each other; an edge that
does not run from its parent's right side to its child's left side; the
canvas too small for its boxes; and a hand-edited cycle that loses nodes
or loops forever.
"""

from __future__ import annotations

import itertools

from cairnq_django.admin.workflow_graph import BOX_HEIGHT, BOX_WIDTH, layers, layout


def test_a_nodes_layer_is_its_longest_path_from_a_root() -> None:
    # a -> b -> c -> d, and the shortcut a -> d: d still goes after c.
    edges = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d"), ("x", "d")]
    assert layers(["a", "b", "c", "d", "x"], edges) == {"a": 0, "b": 1, "c": 2, "d": 3, "x": 0}


def test_every_child_stands_right_of_its_parents_and_no_boxes_overlap() -> None:
    nodes = list(range(60))
    # Each node after one or two earlier ones: a tangle of fans and joins.
    edges = [(node // 2, node) for node in nodes[1:]] + [(node - 3, node) for node in nodes[3::4]]
    drawn = layout(nodes, edges)
    assert set(drawn.boxes) == set(nodes)
    for parent, child in edges:
        assert drawn.boxes[parent].x + BOX_WIDTH < drawn.boxes[child].x
    corners = {(box.x, box.y) for box in drawn.boxes.values()}
    assert len(corners) == len(nodes)
    for one, two in itertools.combinations(drawn.boxes.values(), 2):
        apart_x = one.x + BOX_WIDTH <= two.x or two.x + BOX_WIDTH <= one.x
        apart_y = one.y + BOX_HEIGHT <= two.y or two.y + BOX_HEIGHT <= one.y
        assert apart_x or apart_y, (one, two)
    assert all(box.x + box.width <= drawn.width and box.y + box.height <= drawn.height for box in drawn.boxes.values())


def test_an_edge_runs_from_the_parents_right_side_to_the_childs_left_side() -> None:
    drawn = layout(["p", "c"], [("p", "c")])
    [line] = drawn.lines
    parent, child = drawn.boxes["p"], drawn.boxes["c"]
    start, *_, end = line.path.replace("M", "").replace("C", "").split()
    assert start == f"{parent.x + BOX_WIDTH},{parent.y + BOX_HEIGHT // 2}"
    assert end == f"{child.x},{child.y + BOX_HEIGHT // 2}"
    assert (line.parent, line.child) == ("p", "c")


def test_children_follow_their_parents_order_within_a_layer() -> None:
    # Roots r0, r1 are given in that order; their children are given the other way round.
    drawn = layout(["r0", "r1", "c1", "c0"], [("r0", "c0"), ("r1", "c1")])
    assert drawn.boxes["c0"].row == 0 and drawn.boxes["c1"].row == 1


def test_a_group_is_one_column_and_a_chain_one_row() -> None:
    group = layout(list(range(5)), [])
    assert {box.x for box in group.boxes.values()} == {group.boxes[0].x} and group.height > 5 * BOX_HEIGHT
    chain = layout(list(range(5)), [(n, n + 1) for n in range(4)])
    assert {box.y for box in chain.boxes.values()} == {chain.boxes[0].y} and chain.width > 5 * BOX_WIDTH


def test_a_hand_made_cycle_is_still_drawn_and_unknown_edges_are_left_out() -> None:
    drawn = layout(["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "b"), ("a", "ghost"), ("a", "a")])
    assert set(drawn.boxes) == {"a", "b", "c"}
    assert drawn.boxes["b"].layer == drawn.boxes["c"].layer == 1
    assert {(line.parent, line.child) for line in drawn.lines} == {("a", "b"), ("b", "c"), ("c", "b")}


def test_an_empty_graph_is_an_empty_canvas() -> None:
    drawn = layout([], [])
    assert drawn.boxes == {} and drawn.lines == [] and drawn.width == drawn.height == 16
