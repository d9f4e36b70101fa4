"""A paused queue (``cairnq_django_queue_pause``) is skipped by every claim statement,
by the claimable probe and by the next-due read, in every write mode.

Pins, per statement (claim_one_queue_one_name, claim_one_queue, claim_one_name,
claim): a paused queue's due tasks leased anyway; a paused queue blocking the
open queues drawn with it (its tasks ranked first by priority); a resume that
does not make them claimable again; a probe or next-due read that reports
work due only in a paused queue (an idle worker would spin on it); and a
paused backlog read row by row (the pause must be a test of the queue, made
once, so skipping a queue of 20,000 due tasks costs what skipping 20 does).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

import cairnq_django as cq
from cairnq_django.store import SubmitSpec
from cairnq_django.store.base import ClaimRequest
from cairnq_django.store.postgres.claim_cursor import HEAD_RUN_AT_MS, Start, statement_params

WORKER = "worker_pause_tests"

SHAPES = [
    # (statement, queues drawn, names drawn)
    ("claim_one_queue_one_name", ["paused"], ["job.a"]),
    ("claim_one_queue", ["paused"], None),
    ("claim_one_queue", ["paused"], ["job.a", "job.b"]),
    ("claim_one_name", ["paused", "open"], ["job.a"]),
    ("claim", ["paused", "open"], None),
    ("claim", ["paused", "open"], ["job.a", "job.b"]),
]


def submit(store: Any, queue: str, name: str = "job.a", *, priority: int = 0, delay_ms: int = 0) -> str:
    spec = SubmitSpec(name=name, queue=queue, payload_json="{}", priority=priority, delay_ms=delay_ms)
    return store.submit(spec).id


def draw(store: Any, queues: list[str], names: list[str] | None, limit: int = 10) -> list[Any]:
    """One claim draw without the probe first, as a busy worker draws: the claim statement decides."""
    request = ClaimRequest(queues, WORKER, 30_000, names, probe=False)
    return store.claim_session(request, lambda session: session(names, limit)) or []


def statements_run(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the name of every statement the store runs from now on."""
    ran: list[str] = []
    original = store._rows

    def spy(name: str, params: dict[str, Any]) -> Any:
        ran.append(name)
        return original(name, params)

    monkeypatch.setattr(store, "_rows", spy)
    return ran


@pytest.mark.parametrize(("statement", "queues", "names"), SHAPES)
def test_every_claim_statement_skips_a_paused_queue(
    store: Any, monkeypatch: pytest.MonkeyPatch, statement: str, queues: list[str], names: list[str] | None
) -> None:
    # The paused queue's tasks outrank the open queue's: skipped, not merely later.
    paused = [submit(store, "paused", "job.a", priority=9) for _ in range(3)]
    opened = [submit(store, "open", "job.a") for _ in range(2)]
    cq.pause_queue("paused")
    ran = statements_run(store, monkeypatch)

    rows = draw(store, queues, names)
    assert statement in ran, ran
    expected = opened if "open" in queues else []
    assert sorted(row.id for row in rows) == sorted(expected)
    assert {t.id: t.status for t in cq.list(queue="paused")} == dict.fromkeys(paused, "queued")

    assert cq.resume_queue("paused") is True
    rows = draw(store, queues, names)
    assert sorted(row.id for row in rows) == sorted(paused)


def test_only_the_paused_queue_is_skipped(store: Any) -> None:
    # Queue names that differ by case, a prefix or a LIKE wildcard are other queues.
    for queue in ("emails", "Emails", "emails-2", "email_", "emails%"):
        submit(store, queue)
    cq.pause_queue("emails")
    queues = ["emails", "Emails", "emails-2", "email_", "emails%"]
    rows = draw(store, queues, None)
    assert sorted(row.queue for row in rows) == sorted(queues[1:])


def test_probe_does_not_report_work_due_only_in_a_paused_queue(store: Any) -> None:
    submit(store, "paused")
    cq.pause_queue("paused")
    for names in (None, ["job.a"], ["job.a", "job.b"]):
        assert store.probe_claim(["paused"], names).due is False
        assert store.has_claimable(["paused"], names) is False
    submit(store, "open")
    assert store.probe_claim(["paused", "open"], None).due is True
    cq.resume_queue("paused")
    assert store.probe_claim(["paused"], None).due is True


def test_next_due_ignores_a_paused_queue(store: Any) -> None:
    submit(store, "paused", delay_ms=60_000)
    submit(store, "open", "job.b", delay_ms=120_000)
    cq.pause_queue("paused")
    due = store.next_due(["paused"], ["job.a"])
    assert due is None
    due = store.next_due(["paused", "open"], ["job.a", "job.b"])
    assert due is not None and due[1] == "job.b" and 60_000 < due[0] <= 120_000
    cq.resume_queue("paused")
    due = store.next_due(["paused", "open"], ["job.a", "job.b"])
    assert due is not None and due[1] == "job.a" and due[0] <= 60_000


def test_pauses_of_other_queues_change_nothing(store: Any) -> None:
    ids = [submit(store, "open") for _ in range(3)]
    for n in range(50):
        cq.pause_queue(f"elsewhere-{n}")
    assert store.probe_claim(["open"], None).due is True
    assert sorted(row.id for row in store.claim(["open"], WORKER, limit=10)) == sorted(ids)


# ---- the cost of skipping a paused backlog ------------------------------------------

_PG_FILL = """
INSERT INTO cairnq_tasks (id, name, queue, status, payload, attempt, max_attempts, priority,
    run_at_ms, created_at_ms, updated_at_ms)
SELECT 'task_backlog_' || %(tag)s || '_' || g, 'job.a', 'paused', 'queued', '{}'::jsonb, 0, 3, 0,
    %(now)s - 1000, %(now)s, %(now)s
FROM generate_series(1, %(n)s) AS g
"""
_SQLITE_FILL = """
WITH RECURSIVE seq(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM seq WHERE g < %(n)s)
INSERT INTO cairnq_tasks (id, name, queue, status, payload, attempt, max_attempts, priority,
    run_at_ms, created_at_ms, updated_at_ms)
SELECT 'task_backlog_' || %(tag)s || '_' || g, 'job.a', 'paused', 'queued', '{}', 0, 3, 0,
    %(now)s - 1000, %(now)s, %(now)s
FROM seq
"""


def _fill(store: Any, dialect: str, tag: str, n: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_PG_FILL if dialect == "postgres" else _SQLITE_FILL, {"tag": tag, "n": n, "now": store.now_ms()})


def _sqlite_steps(action: Callable[[], Any]) -> int:
    """How many SQLite virtual-machine steps (in units of 100) ``action`` takes."""
    connection.ensure_connection()
    raw = connection.connection
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    raw.set_progress_handler(count, 100)
    try:
        action()
    finally:
        raw.set_progress_handler(None, 100)
    return steps[0]


def _pg_scans_tasks(statement: str, params: dict[str, Any]) -> list[str]:
    """The reads of cairnq_tasks (index or sequential scans) that ran when ``statement`` ran (rolled back).

    The UPDATE's own TID lookup of the picked rows is not counted.
    """
    from cairnq_django.store.sql_files import load

    queues = [params["queue"]] if "queue" in params else params["queues"]
    # Read from the head, as a process's first claim does (store/postgres/claim_cursor.py).
    params = {
        "synchronous_commit": None, "expired_from_ms": HEAD_RUN_AT_MS, **statement_params([Start.head(q) for q in queues]),
        **params,
    }
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        try:
            cursor.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + load("postgres", statement), params)
            plan = [row[0] for row in cursor.fetchall()]
        finally:
            cursor.execute("ROLLBACK")
    reads = [line for line in plan if "Scan" in line and "on cairnq_tasks " in line and "Tid Scan" not in line]
    return [line for line in reads if "never executed" not in line]


@pytest.mark.parametrize(("statement", "queues", "names"), SHAPES)
def test_a_paused_backlog_is_not_read(
    store: Any, dialect: str, statement: str, queues: list[str], names: list[str] | None
) -> None:
    cq.pause_queue("paused")
    if dialect == "postgres":
        _fill(store, dialect, "big", 20_000)
        params: dict[str, Any] = {"worker_id": WORKER, "lease_ms": 30_000, "limit": 10}
        if "one_queue" in statement:
            params["queue"] = queues[0]
        else:
            params["queues"] = queues
        if "one_name" in statement:
            params["name"] = names[0]  # type: ignore[index]
        else:
            params["names"] = names
        scans = _pg_scans_tasks(statement, params)
        # Only the open queue is read (its three ranges from the head), if it is drawn at all.
        assert len(scans) == (3 if "open" in queues else 0), scans
        assert all("rows=0 loops=1" in line for line in scans), scans
        return
    _fill(store, dialect, "small", 20)
    small = _sqlite_steps(lambda: draw(store, queues, names))
    _fill(store, dialect, "big", 20_000)
    big = _sqlite_steps(lambda: draw(store, queues, names))
    # 20,000 rows read one by one would take several hundred steps of 100.
    assert big <= small + 20, (small, big)


def test_the_probe_and_next_due_do_not_read_a_paused_backlog(store: Any, dialect: str) -> None:
    cq.pause_queue("paused")
    if dialect == "postgres":
        _fill(store, dialect, "big", 20_000)
        probe = {"queues": ["paused"], "names": None, "leaseless": False}
        # The probe's other half, expired leases, reads running rows whatever is paused (by the
        # lease index or, as the statistics fall, the status index): not the queued backlog.
        running = ("cairnq_tasks_lease_idx", "cairnq_tasks_status_completed_idx")
        scans = _pg_scans_tasks("claimable_probe", probe)
        assert [line for line in scans if not any(index in line for index in running)] == []
        due = {"queues": ["paused"], "names": ["job.a"], "max_steps": 64}
        assert _pg_scans_tasks("next_run_at", due) == []
        return
    _fill(store, dialect, "small", 20)
    small = _sqlite_steps(lambda: (store.probe_claim(["paused"], None, leaseless=False), store.next_due(["paused"], ["job.a"])))
    _fill(store, dialect, "big", 20_000)
    big = _sqlite_steps(lambda: (store.probe_claim(["paused"], None, leaseless=False), store.next_due(["paused"], ["job.a"])))
    assert big <= small + 20, (small, big)
