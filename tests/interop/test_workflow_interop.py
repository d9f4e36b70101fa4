"""A workflow whose middle node the real upstream worker (``cairnq==0.15.1``) runs.

Chain ``first -> middle -> last`` on one queue: ``first`` and ``last`` are
run by our worker, ``middle``'s task name is served only by an upstream
worker polling that queue (a ``FOREIGN_TASKS`` name). The upstream worker
must never see a held node (none has a task row), must run ``middle`` once
released, and its end must move the run on (the repair pass notices it), so
``last`` reads the upstream result in ``ctx.parent_results()``. On both
dialects, as ``test_upstream`` is.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management import call_command
from django.test import override_settings

import cairnq_django as cq
from cairnq_django.conf import get_config
from cairnq_django.models import Task
from cairnq_django.store import get_store
from cairnq_django.workflows import advance
from tests.interop.test_upstream import QUEUE, UpstreamLoop, run_worker, stop_worker, upstream  # noqa: F401

OURS = "demo.wf.step"
THEIRS = "interop.wf.upstream"
WAIT_S = 20.0


def run_ours() -> None:
    """One burst of our worker over the queue, serving our step only."""
    call_command("cairnq_worker", "--burst", "--queue", QUEUE, "--task", OURS, verbosity=0)


def assert_no_row_for_a_held_node(run: Any) -> dict[str, str]:
    """Check that exactly the released and ended nodes have task rows; return the states by node."""
    nodes = run.nodes()
    rows = {task.id: task for task in Task.objects.filter(correlation_id=run.id)}
    with_rows = {node.task_id for node in nodes.values() if node.task_id}
    assert set(rows) == with_rows, (rows, nodes)
    for node in nodes.values():
        if node.state == "held":
            assert node.task_id is None
    # Every row says which node it is, under the app's namespace.
    for node in nodes.values():
        if node.task_id:
            assert rows[node.task_id].metadata["cairnq_django"] == {"workflow": run.id, "node": node.name}
    return {name: node.state for name, node in nodes.items()}


def test_a_workflow_with_a_node_run_by_the_upstream_worker_completes(upstream: tuple[UpstreamLoop, Any]) -> None:
    loop, client = upstream
    calls: list[dict[str, Any]] = []

    async def theirs(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
        calls.append({"task_id": ctx.task_id, "metadata": ctx.metadata})
        return {"by": "upstream", "doubled": payload["n"] * 2}

    # As a project whose upstream workers run THEIRS configures it (docs/interop.md).
    config = {**get_config(), "UNKNOWN_TASKS": "raise", "FOREIGN_TASKS": [THEIRS]}
    worker, running = run_worker(loop, client, {THEIRS: theirs})
    try:
        with override_settings(CAIRNQ=config):
            wf = cq.Workflow("interop")
            first = wf.add("first", OURS, {"node": "first"}, queue=QUEUE)
            middle = wf.add("middle", THEIRS, {"n": 21}, queue=QUEUE, after=[first])
            wf.add("last", OURS, {"node": "last"}, queue=QUEUE, after=[middle])
            run = wf.submit()

        # The upstream worker polls the queue every 50 ms, serving the middle's
        # name: for a second, with the first node queued, it finds nothing.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert assert_no_row_for_a_held_node(run) == {"first": "released", "middle": "held", "last": "held"}
            time.sleep(0.1)
        assert calls == []

        # Our worker runs the first node; its settlement releases the middle one.
        run_ours()
        states = assert_no_row_for_a_held_node(run)
        assert states["first"] == "succeeded" and states["middle"] != "held"

        # The upstream worker runs it; the repair pass (every worker's
        # housekeeping, called here) sees that end and releases the last node.
        # (Our burst worker's own pass may have been quicker: then it ran it too.)
        deadline = time.monotonic() + WAIT_S
        while (states := assert_no_row_for_a_held_node(run))["last"] == "held":
            assert time.monotonic() < deadline, f"the upstream node did not end: {states}"
            advance.sweep(get_store().alias)
            time.sleep(0.05)
        assert states["middle"] == "succeeded"

        if not run.done:
            run_ours()
        run.wait(timeout=WAIT_S)
    finally:
        stop_worker(loop, worker, running)

    assert run.status == "succeeded"
    assert_no_row_for_a_held_node(run)
    nodes = run.nodes()
    # The upstream worker ran the middle node once, and only it.
    [call] = calls
    assert call["task_id"] == nodes["middle"].task_id
    assert call["metadata"]["cairnq_django"] == {"workflow": run.id, "node": "middle"}
    assert Task.objects.get(id=nodes["middle"].task_id).worker_id == worker.worker_id
    assert Task.objects.get(id=nodes["first"].task_id).worker_id != worker.worker_id
    results = run.results()
    assert results["middle"] == {"by": "upstream", "doubled": 42}
    assert results["last"] == {"node": "last", "parents": {"middle": {"by": "upstream", "doubled": 42}}}
    assert results["middle"] == loop.call(lambda: client.get(nodes["middle"].task_id)).result

