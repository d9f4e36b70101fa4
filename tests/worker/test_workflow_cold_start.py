"""A fresh worker whose handler threads all make their first workflow call at once.

``ctx.parent_results()`` reads the workflow modules on first use; eight
handler threads of a worker that has run nothing yet call it together, as
the first group a deployment runs would.
"""

from __future__ import annotations

from typing import Any

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import wait_until


def test_eight_handler_threads_of_a_cold_worker_read_their_parents_at_once(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    root = cq.Workflow("cold")
    first = root.add("first", "demo.wf.step", {"node": "first"})
    for i in range(8):
        root.add(f"child{i}", "demo.wf.step", {"node": i}, after=[first])
    group = cq.group(cq.signature("demo.wf.step", {"node": i}) for i in range(8)).submit()
    run = root.submit()
    worker = start_worker("--concurrency", "8", "--task", "demo.wf.step")
    worker.wait_ready()
    wait_until(lambda: group.done and run.done, 60, what="both runs ended")
    assert group.status == "succeeded" and run.status == "succeeded"
    assert not Task.objects.exclude(status="succeeded").exists()
    children = [result for name, result in run.results().items() if name.startswith("child")]
    assert len(children) == 8 and all(set(child["parents"]) == {"first"} for child in children)
    starts = [event for event in ledger() if event["event"] == "start"]
    assert len(starts) == 17
