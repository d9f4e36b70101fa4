"""The shipped SQL statements: same set per dialect, documented parameters, and
query plans that read the protocol's indexes.

Pins: a statement added to one dialect only; a placeholder its opening comment
does not list (or a stray percent sign that breaks binding); and, above all, a
claim, claimable probe or lease recovery that stops using
``cairnq_tasks_claim_idx`` / ``cairnq_tasks_claim_name_idx`` /
``cairnq_tasks_lease_idx`` -- the claim cost would then grow with the table
(1M terminal rows, 20k backing-off rows) instead of staying flat.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.db import connection, transaction

import cairnq_django as cq

from cairnq_django.store.postgres.claim_cursor import HEAD_RUN_AT_MS, Start, statement_params
from cairnq_django.store.sqlite.large_rows import step_sql
from cairnq_django.store.sql_files import DIALECTS, load, statement, statement_names
from cairnq_django.store.sqlite.store import _LARGE_ROW_STEPS
from tests.store.plans import explain_generic

PLACEHOLDER = re.compile(r"%\((\w+)\)s")

TERMINAL_ROWS = 20_000
BACKING_OFF_ROWS = 5_000
DUE_ROWS = 40
RUNNING_ROWS = 300


# Statements with no counterpart by nature: the admin's blob reads need SQLite
# rowids; bulk submit streams rows with PostgreSQL's COPY; only PostgreSQL
# keeps a row estimate for the admin's count. A fleet-limited claim takes
# advisory locks on PostgreSQL (SQLite's claims are serialized already), and
# PostgreSQL logs its starts inside the claim statement.
SQLITE_ONLY = {"admin_payload_rowids", "record_starts", "claim_picked"}
POSTGRES_ONLY = {"copy_tasks", "table_estimate", "reuse_claim_plans", "paused_queues"}


def test_both_dialects_ship_the_same_statements() -> None:
    names = {dialect: statement_names(dialect) for dialect in DIALECTS}
    assert SQLITE_ONLY <= names["sqlite"] and POSTGRES_ONLY <= names["postgres"]
    assert names["sqlite"] - SQLITE_ONLY == names["postgres"] - POSTGRES_ONLY
    assert {
        "claim",
        "claim_one_queue",
        "claim_one_name",
        "claim_one_queue_one_name",
        "claimable_probe",
        "recover_leases",
        "complete_many",
        "fail_many",
        "snooze_many",
        "heartbeat_batch",
        "cancel_many",
        "retry_many",
        "insert_tasks",
        "release",
    } <= names["postgres"]


STATEMENT_SETS = [(dialect, "") for dialect in DIALECTS] + [("sqlite", "large_rows")]


@pytest.mark.parametrize(("dialect", "folder"), STATEMENT_SETS)
def test_statements_document_their_parameters(dialect: str, folder: str) -> None:
    for name in sorted(statement_names(dialect, folder)):
        name = f"{folder}/{name}" if folder else name
        text = load(dialect, name)
        assert text.startswith("--"), f"{dialect}/{name}.sql must open with a comment"
        comment = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("--"))
        assert "params:" in comment, f"{dialect}/{name}.sql lists no params"
        params_text = comment.split("params:", 1)[1]
        for placeholder in set(PLACEHOLDER.findall(text)):
            assert re.search(rf"\b{placeholder}\b", params_text), f"{dialect}/{name}.sql: {placeholder} undocumented"
        # Anything percent-shaped besides a placeholder or %% breaks binding.
        stripped = PLACEHOLDER.sub("", text).replace("%%", "")
        assert "%" not in stripped, f"{dialect}/{name}.sql has a stray percent sign"
        body = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("--")]
        assert ";" not in "\n".join(body).rstrip().rstrip(";"), f"{dialect}/{name}.sql holds two statements"


# ---- plans ------------------------------------------------------------------

_PG_FILL = """
INSERT INTO cairnq_tasks (id, name, queue, status, payload, attempt, max_attempts, priority,
    worker_id, lease_until_ms, run_at_ms, created_at_ms, updated_at_ms, completed_at_ms)
SELECT 'task_fill_' || %(kind)s || '_' || g, CASE WHEN g %% 2 = 0 THEN 'a' ELSE 'b' END,
    'default', %(status)s, '{}'::jsonb, 1, 3, g %% 3, %(worker)s,
    CASE WHEN %(status)s = 'running' THEN %(now)s + 600000 ELSE NULL END,
    %(run_at)s + g, %(now)s - 1000000 + g, %(now)s,
    CASE WHEN %(status)s = 'succeeded' THEN %(now)s - 500000 + g ELSE NULL END
FROM generate_series(1, %(n)s) AS g
"""

_SQLITE_FILL = """
WITH RECURSIVE seq(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM seq WHERE g < %(n)s)
INSERT INTO cairnq_tasks (id, name, queue, status, payload, attempt, max_attempts, priority,
    worker_id, lease_until_ms, run_at_ms, created_at_ms, updated_at_ms, completed_at_ms)
SELECT 'task_fill_' || %(kind)s || '_' || g, CASE WHEN g %% 2 = 0 THEN 'a' ELSE 'b' END,
    'default', %(status)s, '{}', 1, 3, g %% 3, %(worker)s,
    CASE WHEN %(status)s = 'running' THEN %(now)s + 600000 ELSE NULL END,
    %(run_at)s + g, %(now)s - 1000000 + g, %(now)s,
    CASE WHEN %(status)s = 'succeeded' THEN %(now)s - 500000 + g ELSE NULL END
FROM seq
"""


@pytest.fixture
def big_table(store: Any, dialect: str) -> str:
    """Fill the table like a long-lived queue: mostly terminal rows, a backlog
    backing off into the future, a few due rows and some running leases."""
    now = store.now_ms()
    fill = _PG_FILL if dialect == "postgres" else _SQLITE_FILL
    batches = [
        ("done", "succeeded", None, TERMINAL_ROWS, now - 900_000),
        ("later", "queued", None, BACKING_OFF_ROWS, now + 3_600_000),
        ("due", "queued", None, DUE_ROWS, now - 10_000),
        ("run", "running", "w-busy", RUNNING_ROWS, now - 10_000),
    ]
    with connection.cursor() as cursor:
        for kind, status, worker, n, run_at in batches:
            cursor.execute(
                fill, {"kind": kind, "status": status, "worker": worker, "n": n, "run_at": run_at, "now": now}
            )
        cursor.execute("ANALYZE cairnq_tasks")
    return dialect


def _plan(dialect: str, name: str, params: dict[str, Any]) -> str:
    return _plan_sql(dialect, load(dialect, name), params)


def _plan_sql(dialect: str, sql: str, params: dict[str, Any]) -> str:
    if dialect == "sqlite":
        from cairnq_django.store.sqlite.store import _now_ms

        params = {"now": _now_ms(), **params}
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            return "\n".join(str(row[-1]) for row in cursor.fetchall())
    if "%(synchronous_commit)s" in sql:  # claim statements: keep the session's setting
        params = {"synchronous_commit": None, **params}
    params = _from_head(sql, params)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def _from_head(sql: str, params: dict[str, Any]) -> dict[str, Any]:
    """Claim and probe parameters that read each queue from its head (a process's first claim)."""
    if "%(from_priorit" not in sql:
        return params
    queues = [params["queue"]] if "queue" in params else list(params["queues"])
    # The probe's expired-lease half from the lowest lease too (a full probe).
    return {**statement_params([Start.head(q) for q in queues]), "expired_from_ms": HEAD_RUN_AT_MS, **params}


def _generic_plan(name: str, params: dict[str, Any], *, claim_connection: bool = False) -> str:
    """PostgreSQL's plan for statement ``name`` made without its values (see tests/store/plans.py)."""
    sql = load("postgres", name)
    if "%(synchronous_commit)s" in sql:
        params = {"synchronous_commit": None, **params}
    return str(explain_generic(name, _from_head(sql, params), claim_connection=claim_connection))


def _full_scans(dialect: str, plan: str) -> list[str]:
    """Return the plan lines that read all of cairnq_tasks (or all of one of its indexes)."""
    if dialect == "postgres":
        return [line for line in plan.splitlines() if "Seq Scan on cairnq_tasks" in line]
    # SQLite: SEARCH is a range read; SCAN reads everything (even "USING INDEX").
    allowed = ("json_each", "wanted", "CONSTANT ROW", "VIRTUAL TABLE")
    return [line for line in plan.splitlines() if "SCAN " in line and not any(a in line for a in allowed)]


def _lists(dialect: str, values: list[str] | None) -> Any:
    if values is None:
        return None
    return values if dialect == "postgres" else json.dumps(values)


CLAIM_SHAPES = [
    # (statement, queues, names, index it must read, must it avoid a sort?)
    ("claim_one_queue", ["default"], None, "cairnq_tasks_claim_idx", True),
    ("claim_one_queue", ["default"], ["a", "b"], "cairnq_tasks_claim", False),
    ("claim_one_queue_one_name", ["default"], ["a"], "cairnq_tasks_claim_name_idx", True),
    ("claim_one_name", ["default", "other"], ["a"], "cairnq_tasks_claim_name_idx", False),
    ("claim", ["default", "other"], None, "cairnq_tasks_claim", False),
]


@pytest.mark.parametrize(("statement", "queues", "names", "index", "no_sort"), CLAIM_SHAPES)
def test_claims_read_the_claim_indexes(
    big_table: str, statement: str, queues: list[str], names: list[str] | None, index: str, no_sort: bool
) -> None:
    dialect = big_table
    params: dict[str, Any] = {"worker_id": "w1", "lease_ms": 30_000, "limit": 10}
    if "one_queue" in statement:
        params["queue"] = queues[0]
    else:
        params["queues"] = _lists(dialect, queues)
    if "one_name" in statement:
        params["name"] = names[0]  # type: ignore[index]
    else:
        params["names"] = _lists(dialect, names)
    plan = _plan(dialect, statement, params)
    if dialect == "sqlite":
        # Large-row mode's pick is the same selection and must plan the same.
        pick = _plan_sql(dialect, step_sql(f"{statement}_pick"), params)
        assert pick.replace("SEARCH head", "SEARCH cairnq_tasks") in plan.replace("SEARCH head", "SEARCH cairnq_tasks"), (pick, plan)
    assert index in plan, plan
    assert _full_scans(dialect, plan) == [], plan
    if len(queues) > 1:
        # Several queues: each queue's head is read on its own, then merged.
        assert ("Function Scan on" if dialect == "postgres" else "CORRELATED LIST SUBQUERY") in plan, plan
    if no_sort:
        assert ("Sort" if dialect == "postgres" else "TEMP B-TREE") not in plan, plan
    if dialect == "postgres":
        # A worker's connection plans each claim once, without its values:
        # that plan must read the claim indexes just the same.
        generic = _generic_plan(statement, params, claim_connection=True)
        assert index in generic, generic
        assert _full_scans(dialect, generic) == [], generic
        assert "Tid Scan on cairnq_tasks t" in generic, generic
        if no_sort:
            assert "Sort" not in generic, generic


@pytest.mark.parametrize(("statement", "queues", "names", "index", "no_sort"), CLAIM_SHAPES)
def test_claims_update_by_tid_even_with_stale_statistics(
    store: Any, dialect: str, statement: str, queues: list[str], names: list[str] | None, index: str, no_sort: bool
) -> None:
    # A queue analyzed while empty and then filled: the planner believes the
    # table is empty. The UPDATE must still go straight to the picked rows
    # (a TID scan), not scan the table; this made every claim of a
    # concurrency-1 drain read the whole backlog.
    if dialect != "postgres":
        pytest.skip("TID scans and planner statistics are PostgreSQL's")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE cairnq_tasks")  # empty: reltuples = 0
        now = store.now_ms()
        cursor.execute(
            _PG_FILL,
            {"kind": "stale", "status": "queued", "worker": None, "n": 5000, "run_at": now - 10_000, "now": now},
        )
    params: dict[str, Any] = {"worker_id": "w1", "lease_ms": 30_000, "limit": 1}
    if "one_queue" in statement:
        params["queue"] = queues[0]
    else:
        params["queues"] = queues
    if "one_name" in statement:
        params["name"] = names[0]  # type: ignore[index]
    else:
        params["names"] = names
    plan = _plan(dialect, statement, params)
    assert "Tid Scan on cairnq_tasks t" in plan, plan
    assert _full_scans(dialect, plan) == [], plan


@pytest.mark.parametrize("statement", ["claim_one_queue_one_name", "claim_one_name"])
def test_one_name_claims_read_their_name_when_the_table_holds_one_other_name(
    store: Any, dialect: str, statement: str
) -> None:
    # A batch handler's name with no rows, in a queue whose whole backlog is
    # another name's: the statistics see one distinct name. The worker's plan,
    # made without the name's value, must still read the name's own index, not
    # walk the other name's backlog through cairnq_tasks_claim_idx.
    if dialect != "postgres":
        pytest.skip("generic plans are PostgreSQL's")
    now = store.now_ms()
    with connection.cursor() as cursor:
        cursor.execute(
            _PG_FILL,
            {"kind": "other", "status": "queued", "worker": None, "n": 5000, "run_at": now - 10_000, "now": now},
        )
        cursor.execute("UPDATE cairnq_tasks SET name = 'a'")
        cursor.execute("ANALYZE cairnq_tasks")
    params: dict[str, Any] = {"worker_id": "w1", "lease_ms": 30_000, "limit": 10, "name": "b"}
    if statement == "claim_one_queue_one_name":
        params["queue"] = "default"
    else:
        params["queues"] = ["default", "other"]
    generic = _generic_plan(statement, params, claim_connection=True)
    assert "cairnq_tasks_claim_name_idx" in generic, generic
    assert "cairnq_tasks_claim_idx" not in generic, generic


def test_probe_reads_claim_and_lease_indexes(big_table: str) -> None:
    dialect = big_table
    for names in (None, ["a"], ["a", "b"]):
        plan = _plan(
            dialect,
            "claimable_probe",
            {"queues": _lists(dialect, ["default"]), "names": _lists(dialect, names), "leaseless": False},
        )
        assert "cairnq_tasks_claim" in plan and "cairnq_tasks_lease_idx" in plan, plan
        assert _full_scans(dialect, plan) == [], plan
        if dialect == "postgres":
            # A worker's claim connection keeps one plan for the probe, made without its values.
            params = {"queues": ["default"], "names": names, "leaseless": False}
            generic = _generic_plan("claimable_probe", params, claim_connection=True)
            assert "cairnq_tasks_claim" in generic and "cairnq_tasks_lease_idx" in generic, generic
            assert _full_scans(dialect, generic) == [], generic


@pytest.fixture
def analyzed_with_only_finished_rows(store: Any, dialect: str) -> int:
    """Statistics taken while the table held only finished rows (a quiet night),
    then a burst: 3,000 running (worker w1) and 3,000 queued a minute ahead.

    The planner then counts one 'running' and one 'queued' row, and reading
    cairnq_tasks_status_completed_idx by status looks cheapest; under a held
    snapshot that walks every running or queued version the table ever had.
    """
    if dialect != "postgres":
        pytest.skip("planner statistics are PostgreSQL's")
    now = int(store.now_ms())
    with connection.cursor() as cursor:
        cursor.execute(
            _PG_FILL,
            {"kind": "done", "status": "succeeded", "worker": None, "n": 20_000, "run_at": now - 900_000, "now": now},
        )
        cursor.execute("ANALYZE cairnq_tasks")
        for kind, status, worker, run_at in (("run", "running", "w1", now - 10_000), ("later", "queued", None, now + 60_000)):
            cursor.execute(
                _PG_FILL, {"kind": kind, "status": status, "worker": worker, "n": 3_000, "run_at": run_at, "now": now}
            )
    return now


def test_idle_polls_keep_to_sort_free_indexes_when_analyzed_with_only_finished_rows(
    store: Any, analyzed_with_only_finished_rows: int
) -> None:
    # The claim connection's plans must keep to the indexes whose order the
    # statement asks for, whatever the statistics say.
    for names in (None, ["a"], ["a", "b"]):
        probe = _generic_plan(
            "claimable_probe", {"queues": ["default"], "names": names, "leaseless": False}, claim_connection=True
        )
        assert "cairnq_tasks_lease_idx" in probe and "Sort" not in probe, probe
    walk = _generic_plan(
        "next_run_at", {"queues": ["default"], "names": ["a", "b"], "max_steps": 64}, claim_connection=True
    )
    assert "cairnq_tasks_claim_name_idx" in walk and "cairnq_tasks_status_completed_idx" not in walk, walk
    # Its one sort, of the walk's own rows, is costed past jit_above_cost under
    # enable_sort = off: the connection must not compile it on every idle poll.
    assert "JIT" not in walk and "JIT" not in probe, walk
    # The answers stand: nothing due, a lease ten minutes away, the backlog a minute ahead.
    assert not store.has_claimable(["default"], ["a"])
    due = store.next_due(["default"], ["a", "b"])
    assert due is not None and 50_000 < due[0] <= 60_001, due


SETTLEMENTS = [
    # (statement, its parameters besides ids and worker_id)
    ("complete_many", {"results": "{}"}),
    ("fail_many", {"errors": ["{}", "{}"], "retryable": [True, False], "delays": [0, 0]}),
    ("snooze_many", {"delays": [1000, 1000]}),
    ("heartbeat_batch", {"lease_ms": 30_000}),
    ("release", {}),
    (
        "worker_beat",
        {
            "host": "h", "pid": 1, "queues": "[]", "names": "[]", "resources": "{}", "global_resources": "{}",
            "concurrency": 1, "version": "v", "interval_ms": 10_000, "in_flight": 2, "succeeded": 0, "failed": 0,
            "per_minute": 0.0, "lease_ms": 30_000,
        },
    ),
]

@pytest.mark.parametrize("statistics", ["only_finished", "everything"])
def test_settlements_find_their_rows_by_primary_key(
    request: pytest.FixtureRequest, store: Any, dialect: str, statistics: str
) -> None:
    # Planned per call on the settler's connection, with the ids as values:
    # they must go by id through the primary key, for two ids or for three
    # batches of 256, whatever the statistics say. Reading the status (or
    # lease) index's running entries costs 4,035 buffers, 17.5 ms a
    # completion under a held snapshot (fleet_scale.py xmin); a literal list
    # of hundreds of ids once made a scan of the whole table look cheaper
    # (a PostgreSQL batch drain at a third of its rate). One table fill for
    # every statement and size: each fill leaves dead rows behind it.
    if dialect != "postgres":
        pytest.skip("planner statistics are PostgreSQL's")
    if statistics == "only_finished":
        request.getfixturevalue("analyzed_with_only_finished_rows")
        worker, running = "w1", 3_000
    else:
        request.getfixturevalue("big_table")
        worker, running = "w-busy", RUNNING_ROWS
    for name, extra in SETTLEMENTS:
        for n_ids in (2, 768):
            ids = [f"task_fill_run_{i}" for i in range(1, n_ids + 1)]
            params = {"ids": ids, "worker_id": worker, **_sized(extra, n_ids)}
            plan = _explain_analyze_rolled_back(load("postgres", name), params)
            where = f"{name} with {n_ids} ids:\n{plan}"
            assert "cairnq_tasks_pkey" in plan, where
            assert "Seq Scan on cairnq_tasks" not in plan, where
            assert "cairnq_tasks_status_completed_idx" not in plan and "cairnq_tasks_lease_idx" not in plan, where
            # Every listed row that runs was found and written.
            found = min(n_ids, running)
            assert re.search(rf"Update on cairnq_tasks.*\n(.*\n)*.*rows={found} loops=1", plan), where


def _sized(extra: dict[str, Any], n: int) -> dict[str, Any]:
    """A settlement's parallel arrays stretched (or cut) to ``n`` entries."""
    return {key: (value * n)[:n] if isinstance(value, list) else value for key, value in extra.items()}


def _explain_analyze_rolled_back(sql: str, params: dict[str, Any]) -> str:
    """EXPLAIN ANALYZE a write inside a savepoint that is then rolled back: the test's data stays."""

    class _Undo(Exception):
        pass

    plan = ""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT TEXT) " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            raise _Undo
    except _Undo:
        pass
    return plan


def test_recovery_reads_the_lease_index(big_table: str) -> None:
    dialect = big_table
    plan = _plan(dialect, "recover_leases", {"lease_expired_error": "{}"})
    assert "cairnq_tasks_lease_idx" in plan, plan
    assert _full_scans(dialect, plan) == [], plan


def test_claims_on_the_big_table_still_take_due_work(store: Any, big_table: str) -> None:
    rows = store.claim(["default"], "w1", limit=5)
    assert len(rows) == 5 and all(r.id.startswith("task_fill_due_") for r in rows)
    assert store.has_claimable(["default"], ["a"])
    assert store.recover_leases() == 0


def test_unserved_names_walks_the_claim_name_index(big_table: str) -> None:
    # One index probe per distinct queued name: never a read of the backlog.
    dialect = big_table
    plan = _plan(
        dialect,
        "unserved_names",
        {
            "queues": _lists(dialect, ["default", "other"]),
            "names": _lists(dialect, ["a"]),
            "max_names": 1000,
            "limit": 100,
        },
    )
    assert "cairnq_tasks_claim_name_idx" in plan, plan
    assert "cairnq_tasks_name_idx" not in plan, plan
    # SQLite's "SCAN walk" reads the recursive CTE's own work rows, not the table.
    assert [line for line in _full_scans(dialect, plan) if "walk" not in line] == [], plan
    assert ("Sort" if dialect == "postgres" else "TEMP B-TREE") not in plan, plan


def test_next_run_at_walks_the_claim_name_index(store: Any, big_table: str) -> None:
    # The idle worker's "when is the next task due": index probes per queue,
    # name and priority, never a read of the backlog backing off.
    dialect = big_table
    params = {"queues": _lists(dialect, ["default", "other"]), "names": _lists(dialect, ["a", "b"]), "max_steps": 64}
    plan = _plan(dialect, "next_run_at", params)
    assert "cairnq_tasks_claim_name_idx" in plan, plan
    assert "cairnq_tasks_name_idx" not in plan, plan
    assert [line for line in _full_scans(dialect, plan) if "walk" not in line] == [], plan
    if dialect == "postgres":
        generic = _generic_plan("next_run_at", params, claim_connection=True)
        assert "cairnq_tasks_claim_name_idx" in generic and _full_scans(dialect, generic) == [], generic
    # The due rows are the claim's; the earliest waiting row is "later" + 1 or 2
    # (g = 1 is name 'b', g = 2 name 'a'), an hour ahead.
    for names, offset, name in ((["a"], 2, "a"), (["b"], 1, "b"), (["a", "b"], 1, "b")):
        due = store.next_due(["default"], names)
        assert due is not None and due[1] == name, (names, due)
        assert 3_600_000 + offset - 5_000 < due[0] <= 3_600_000 + offset, (names, due)
    assert store.next_due(["other"], ["a"]) is None
    assert store.next_due(["default"], ["unknown"]) is None


def test_queue_overview_reads_only_the_claim_index(store: Any, big_table: str) -> None:
    # The metrics view's reading, once a second: probes per queue and priority
    # and counts of the live rows, never a read of the terminal rows. With live
    # rows a fifth of the table PostgreSQL rightly counts them by a sequential
    # scan; a long-lived queue's table is mostly terminal rows, as here.
    dialect = big_table
    now = store.now_ms()
    with connection.cursor() as cursor:
        cursor.execute(
            _PG_FILL if dialect == "postgres" else _SQLITE_FILL,
            {"kind": "old", "status": "succeeded", "worker": None, "n": 100_000, "run_at": now - 9_000_000, "now": now},
        )
        cursor.execute("ANALYZE cairnq_tasks")
    params = {"max_queues": 1000, "max_steps": 64}
    plan = _plan(dialect, "queue_overview", params)
    assert "cairnq_tasks_claim_idx" in plan, plan
    assert [line for line in _full_scans(dialect, plan) if "cairnq_tasks" in line] == [], plan
    if dialect == "postgres":
        generic = _generic_plan("queue_overview", params)
        assert "cairnq_tasks_claim_idx" in generic and _full_scans(dialect, generic) == [], generic
    cq.pause_queue("idle")
    (default, idle) = store.queue_overview()
    # Filling and planning above can take seconds on a loaded machine; they add to the age.
    elapsed_ms = store.now_ms() - now
    # The earliest due row is "due" + 1, ten seconds ago; the backlog an hour
    # ahead is queued but not due.
    assert (default.queue, default.queued, default.running, default.paused) == (
        "default", BACKING_OFF_ROWS + DUE_ROWS, RUNNING_ROWS, False
    )
    assert default.due_age_ms is not None and 9_999 <= default.due_age_ms < 9_999 + elapsed_ms + 5_000, default
    assert (idle.queue, idle.queued, idle.running, idle.due_age_ms, idle.paused) == ("idle", 0, 0, None, True)
    # The walks stop at their bounds.
    assert [item.queue for item in store.queue_overview(max_queues=1)] == ["default", "idle"]
    assert store.queue_overview(max_steps=1)[0].due_age_ms is not None


def test_sqlite_large_row_steps_go_by_primary_key(big_table: str) -> None:
    # Every pick (but the claim's, pinned above), write and read of large-row
    # mode starts from the listed ids: none may read the whole table.
    if big_table != "sqlite":
        pytest.skip("large-row mode is SQLite's")
    ids = json.dumps(["task_fill_running_1", "task_fill_running_2"])
    items = json.dumps([{"id": "task_fill_running_1", "result": None, "error": "{}", "retryable": 1, "delay_ms": 0}])
    params = {
        "picked": ids, "ids": ids, "items": items, "worker_id": "w1", "lease_ms": 30_000,
        "id": "task_fill_running_1", "progress": 0.5, "message": None, "result": None,
        "error": "{}", "retryable": 1, "delay_ms": 0,
    }
    steps = sorted({step for pick, write, read in _LARGE_ROW_STEPS.values() for step in (pick, write, read)
                    if step is not None and not (step.startswith("claim") and step.endswith("_pick"))})
    assert len(steps) == 16, steps
    for name in steps:
        plan = _plan_sql("sqlite", step_sql(name), params)
        assert _full_scans("sqlite", plan) == [], (name, plan)
        assert "PRIMARY KEY" in plan or "sqlite_autoindex_cairnq_tasks_1" in plan, (name, plan)


@pytest.mark.parametrize(
    "name",
    [
        "complete_many", "fail_many", "snooze_many", "heartbeat_batch", "release",
        "heartbeat", "progress", "complete", "succeed", "fail",
    ],
)
def test_sqlite_large_row_writes_stay_in_step(name: str) -> None:
    # Each large-row write is derived from its single statement: the UPDATE
    # without RETURNING, restricted to the picked ids.
    def body(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("--")]

    single = body(load("sqlite", name))
    single = single[: next(i for i, line in enumerate(single) if line.startswith("RETURNING"))]
    write = body(step_sql(f"{name}_write"))
    assert write[:-1] == single
    assert write[-1].strip().endswith("IN (SELECT value FROM json_each(%(picked)s))")


@pytest.mark.parametrize(("dialect", "folder"), STATEMENT_SETS)
def test_statements_are_sent_without_their_comments(dialect: str, folder: str) -> None:
    # psycopg re-parses on every execution any query over 4 KiB; the claim
    # statements only fit under that without their comments. The title line
    # stays, to name the statement wherever the server shows it.
    for name in sorted(statement_names(dialect, folder)):
        name = f"{folder}/{name}" if folder else name
        sent, text = statement(dialect, name), load(dialect, name)
        title, *code = text.splitlines()
        assert sent.splitlines() == [title, *(line for line in code if line.strip() and not line.lstrip().startswith("--"))]
        assert "\n--" not in sent and "\n\n" not in sent, f"{dialect}/{name}.sql is sent with its comments"
        # SQLite's limited claims are over the size, but only psycopg keeps that cache.
        if dialect == "postgres" or name not in {"claim_limited", "claim_limited_keyed"}:
            assert len(sent) < 4096, f"{dialect}/{name}.sql is over psycopg's 4 KiB parse cache"


def test_probe_and_recovery_find_leaseless_running_rows_by_index(big_table: str) -> None:
    # A running row with no lease (a foreign writer) counts as expired. The
    # partial lease index leaves such rows out; the arm that finds them reads
    # the running rows by cairnq_tasks_status_completed_idx, never the table.
    dialect = big_table
    probe = _plan(
        dialect,
        "claimable_probe",
        {"queues": _lists(dialect, ["default"]), "names": None, "leaseless": True if dialect == "postgres" else 1},
    )
    recovery = _plan(dialect, "recover_leases", {"lease_expired_error": "{}"})
    plans = [probe, recovery]
    if dialect == "postgres":
        plans.append(_generic_plan("claimable_probe", {"queues": ["default"], "names": None, "leaseless": True}, claim_connection=True))
    for plan in plans:
        assert "cairnq_tasks_lease_idx" in plan and "cairnq_tasks_status_completed_idx" in plan, plan
        assert _full_scans(dialect, plan) == [], plan


def test_terminal_counts_stop_at_the_cap_through_the_claim_index(store: Any, big_table: str) -> None:
    # The dashboard's finished counts: a (queue, status) range of the claim
    # index per figure, cut off at the cap, never the table's terminal rows.
    dialect = big_table
    # The dashboard's cap: small beside a long-lived queue's finished rows, so
    # the index range stays cheaper than a scan even before VACUUM has run.
    params = {"queues": _lists(dialect, ["default", "mail"]), "cap": 1_000}
    plan = _plan(dialect, "terminal_counts", params)
    assert plan.count("cairnq_tasks_claim_idx") == 3, plan
    assert [line for line in _full_scans(dialect, plan) if "cairnq_tasks" in line] == [], plan
    if dialect == "postgres":
        assert plan.count("Index Only Scan using cairnq_tasks_claim_idx") == 3, plan
        generic = _generic_plan("terminal_counts", params)
        assert generic.count("cairnq_tasks_claim_idx") == 3 and _full_scans(dialect, generic) == [], generic
    counts = store.terminal_counts(["default", "mail"], 1_000)
    assert counts == {
        "default": {"succeeded": 1_000, "failed": 0, "canceled": 0},
        "mail": {"succeeded": 0, "failed": 0, "canceled": 0},
    }
    assert store.terminal_counts(["default"], 7)["default"]["succeeded"] == 7
    assert store.terminal_counts(["default"], TERMINAL_ROWS + 1)["default"]["succeeded"] == TERMINAL_ROWS
    assert store.terminal_counts([], 7) == {}
