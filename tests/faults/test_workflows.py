"""F30: workflows advanced exactly once while workers are killed (issue 36).

Random DAGs run on several worker processes (4 on PostgreSQL, 2 on SQLite)
while a worker is SIGKILLed every so often and, on PostgreSQL, the workers'
backends are terminated. What must hold, read from the database and the
handlers' ledger:

* every node ends (every run ``succeeded``: each node may lose a few
  attempts to the kills, never all of them);
* no node's task row is inserted twice (one row a node, keyed by run and
  node name in its metadata);
* no node's task row exists before every parent's task ended: its
  ``created_at_ms`` is at or after each parent's ``completed_at_ms`` (one
  database clock), and no handler of a node started before its parents'
  handlers had all ended at least once.

The smoke size (both dialects, every run) is 12 DAGs of 5-12 nodes; with
``CAIRNQ_FAULTS=full`` it is the issue's 200 DAGs of 5-50 nodes.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from django.db import connection

import cairnq_django as cq
from cairnq_django.models import Task
from cairnq_django.workflows.models import WorkflowEdge, WorkflowNode

from .conftest import FULL, starts, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

FAST = {"LEASE_MS": 2000, "HEARTBEAT_INTERVAL_MS": 500, "POLL_INTERVAL_MS": 50}


def random_dag(rng: random.Random, index: int, nodes: int, attempts: int) -> cq.Workflow:
    """A DAG of ``nodes`` sleeps, each after up to three earlier nodes (so no cycle)."""
    wf = cq.Workflow(f"f30-{index}")
    for i in range(nodes):
        parents = rng.sample(range(i), k=min(i, rng.randint(0, 3)))
        wf.add(f"n{i}", "demo.sleep", {"ms": rng.randint(0, 40)}, after=[f"n{p}" for p in parents],
               max_attempts=attempts)
    return wf


def _terminate_worker_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND application_name LIKE 'cairnq_worker:%%'"
        )
        return cursor.fetchone()[0]


@pytest.mark.smoke
def test_f30_random_dags_under_kills_advance_each_node_exactly_once(
    cairnq_db: Any, dialect: str, supervisor: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    dags, smallest, largest, kills = (200, 5, 50, 10) if FULL else (12, 5, 12, 3)
    rng = random.Random(30)
    runs = [random_dag(rng, i, rng.randint(smallest, largest), kills + 3).submit() for i in range(dags)]
    sup = supervisor(4 if dialect == "postgres" else 2, "--concurrency", "4", overrides=FAST)
    wait_until(lambda: starts(ledger()), 30, what="first start")
    terminated = 0
    for _ in range(kills):
        time.sleep(1.0)
        sup.kill_random()
        if dialect == "postgres":
            terminated += _terminate_worker_backends()
    wait_until(lambda: all(run.done for run in runs), 300, interval=0.25, what="every run ended")
    # A worker the supervisor restarted after the last kill may still be
    # starting Python and Django: a SIGTERM then ends it with -15, as any
    # process. Its handlers are in once it has printed its banner.
    time.sleep(0.3)  # past the supervisor's next look
    wait_until(lambda: all(w.alive() and "cairnq worker worker_" in w.output() for w in sup.workers), 30,
               what="every worker past its banner")
    codes = sup.stop()
    assert all(code == 0 for code in codes), codes

    run_ids = [run.id for run in runs]
    assert {run.status for run in runs} == {"succeeded"}
    nodes = list(WorkflowNode.objects.filter(run_id__in=run_ids).values("id", "run_id", "name", "task_id"))
    rows = {
        row["id"]: row
        for row in Task.objects.filter(correlation_id__in=run_ids).values(
            "id", "metadata", "created_at_ms", "completed_at_ms", "status"
        )
    }
    # One task row a node: none inserted twice, none missing.
    inserted = [(row["metadata"]["cairnq_django"]["workflow"], row["metadata"]["cairnq_django"]["node"]) for row in rows.values()]
    assert len(inserted) == len(set(inserted)) == len(nodes)
    assert all(row["status"] == "succeeded" for row in rows.values())
    # No node released before its parents ended, by the database's clock and by the handlers'.
    task_of = {node["id"]: node["task_id"] for node in nodes}
    events = ledger()
    first_start: dict[str, float] = {}
    first_end: dict[str, float] = {}
    for event in events:
        if event["event"] == "start":
            first_start.setdefault(event["task_id"], event["wall"])
        elif event["event"] == "end":
            first_end.setdefault(event["task_id"], event["wall"])
    edges = list(WorkflowEdge.objects.filter(run_id__in=run_ids).values_list("parent_id", "child_id"))
    for parent, child in edges:
        parent_row, child_row = rows[task_of[parent]], rows[task_of[child]]
        assert child_row["created_at_ms"] >= parent_row["completed_at_ms"], (parent, child)
        # A parent whose worker was killed after its handler returned runs again, so only its
        # first end is sure to come before the child's release.
        assert first_start[task_of[child]] > first_end[task_of[parent]], (parent, child)
    figures.update(
        tasks=len(nodes),
        faults=f"{kills} x kill -9" + (f", {terminated} backends terminated" if terminated else ""),
        why="nodes re-run after their worker was killed (each still inserted once)",
    )
