"""The workflows' SQL (``workflows/sql/<dialect>/``): the same statements in both dialects, each
documenting its parameters, and each finding its rows by index beside many other runs.

Pins: an advance that reads every node or edge of every run per settlement
(a plan's full scan grows with the table, as the tasks table's settlements
once did: docs/performance.md, "The batch drain's slide").
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest
from django.db import connection

from cairnq_django.workflows import statements
from cairnq_django.workflows.models import WorkflowEdge, WorkflowNode, WorkflowRun

DIALECTS = ("postgres", "sqlite")


def _names(dialect: str) -> set[str]:
    folder = resources.files("cairnq_django.workflows").joinpath("sql", dialect)
    return {entry.name[:-4] for entry in folder.iterdir() if entry.name.endswith(".sql")}


def test_both_dialects_ship_the_same_statements() -> None:
    assert _names("postgres") == _names("sqlite")
    assert {"end_released", "end_held", "count_down", "count_runs_down", "count_callbacks_down"} <= _names("sqlite")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_statement_names_itself_and_documents_its_parameters(dialect: str) -> None:
    for name in _names(dialect):
        sent = statements.statement(dialect, name)
        assert sent.splitlines()[0] == f"-- workflows: {name}", "the first line names it in the query log"
        text = resources.files("cairnq_django.workflows").joinpath("sql", dialect, f"{name}.sql").read_text()
        documented = next(line for line in text.splitlines() if line.startswith("-- params:"))
        for placeholder in {part.split(")s")[0] for part in text.split("%(")[1:]}:
            assert placeholder in documented, f"{dialect}/{name}: %({placeholder})s not in {documented!r}"


@pytest.fixture(params=[True, False], ids=["analyzed", "no-statistics"])
def many_runs(request: pytest.FixtureRequest, cairnq_db: Any) -> str:
    """2,000 runs of 10 nodes, every node but the first a child of the first: 20,000 nodes.

    Planned with statistics and without (a new database: SQLite gathers none unless asked).
    """
    if not request.param and connection.vendor == "postgresql":
        pytest.skip("PostgreSQL's autovacuum gathers statistics by itself; SQLite gathers none unless asked")
    runs = [
        WorkflowRun(id=f"wf_plan{i:04d}", name="plan", nodes_total=10, nodes_left=10, created_at_ms=i)
        for i in range(2_000)
    ]
    WorkflowRun.objects.bulk_create(runs)
    nodes = [
        WorkflowNode(run_id=run.id, name=f"n{j}", task_name="demo.noop", payload_json="{}", queue="default",
                     priority=0, max_attempts=1, parents_left=0 if j == 0 else 1,
                     state="released" if j == 0 else "held", task_id=f"task_plan{run.id}" if j == 0 else None)
        for run in runs
        for j in range(10)
    ]
    WorkflowNode.objects.bulk_create(nodes, batch_size=5_000)
    by_run: dict[str, list[WorkflowNode]] = {}
    for node in WorkflowNode.objects.filter(run__id__startswith="wf_plan").order_by("id"):
        by_run.setdefault(node.run_id, []).append(node)
    WorkflowEdge.objects.bulk_create(
        [WorkflowEdge(run_id=run_id, parent_id=found[0].id, child_id=child.id)
         for run_id, found in by_run.items() for child in found[1:]],
        batch_size=5_000,
    )
    with connection.cursor() as cursor:
        if request.param:
            for table in ("cairnq_django_workflow", "cairnq_django_workflow_node", "cairnq_django_workflow_edge"):
                cursor.execute(f"ANALYZE {table}")
        else:
            # An earlier test's ANALYZE stays in the file: forget it, and have the planner reload.
            cursor.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'")
            if cursor.fetchone():
                cursor.execute("DELETE FROM sqlite_stat1")
                cursor.execute("ANALYZE sqlite_schema")
    return "postgres" if connection.vendor == "postgresql" else "sqlite"


def _plan(dialect: str, name: str, key: str, rows: list[dict[str, Any]]) -> str:
    params: dict[str, Any] = {key: json.dumps(rows), "now": 0}
    with connection.cursor() as cursor:
        if dialect == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + statements.statement(dialect, name), params)
            return "\n".join(str(row[-1]) for row in cursor.fetchall())
        cursor.execute("EXPLAIN " + statements.statement(dialect, name), params)
        return "\n".join(row[0] for row in cursor.fetchall())


def _full_scans(dialect: str, plan: str) -> list[str]:
    """The plan lines that read a whole workflow table."""
    if dialect == "postgres":
        return [line for line in plan.splitlines() if "Seq Scan on cairnq_django_workflow" in line]
    # SQLite: SCAN reads everything (even "USING INDEX"); json_each's rows are the statement's own.
    return [line for line in plan.splitlines()
            if "SCAN " in line and "json_each" not in line and "cairnq_django_workflow" in line]


def test_each_step_of_an_advance_finds_its_rows_by_index(many_runs: str) -> None:
    dialect = many_runs
    node = WorkflowNode.objects.filter(run_id="wf_plan0007", name="n0").get()
    shapes = [
        ("end_released", "ended", [{"task_id": node.task_id, "state": "succeeded", "error": ""}] * 2),
        ("end_held", "ended", [{"id": node.id + 1, "state": "canceled", "error": "x"}] * 2),
        ("count_down", "ended", [{"id": node.id, "failed": 0}, {"id": node.id + 10, "failed": 1}]),
        ("count_runs_down", "runs", [{"run_id": "wf_plan0007", "ended": 1, "failed": 0}] * 2),
        ("count_callbacks_down", "runs", [{"run_id": "wf_plan0007", "ended": 1, "failed": 0}] * 2),
    ]
    for name, key, rows in shapes:
        plan = _plan(dialect, name, key, rows)
        assert not _full_scans(dialect, plan), f"{name} reads a whole table:\n{plan}"
        if name == "end_released":
            # By task id, not through the index of every released node (a group in flight fills it).
            assert "cairnq_django_wfnode_task_idx" in plan and "live_idx" not in plan, plan
