"""Pin what a handler can do through its context in a real worker: a cancel of
a running task is observed on the heartbeat and ends ``canceled``; writes in
``ctx.atomic()`` commit with the completion and roll back when the lease is
gone; children get parent/root lineage; a lease lost to another owner flags the
context and nothing more is written for it."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_cancel_of_running_task_seen_on_heartbeat(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    task_id = cq.submit("demo.hang", {"seconds": 60}).id
    worker = start_worker(overrides={"LEASE_MS": 1500})
    wait_until(lambda: [e for e in ledger() if e["event"] == "start"], 20, what="start")
    cq.cancel(task_id)
    wait_until(
        lambda: Task.objects.get(id=task_id).status == "canceled", 10, what="canceled"
    )
    task = Task.objects.get(id=task_id)
    assert task.result is None and task.lease_until_ms is None
    (end,) = [e for e in ledger() if e["event"] == "end"]
    assert end["cancel_seen"] is True and end["lost"] is False
    assert worker.alive()


def test_atomic_commits_writes_with_completion(
    cairnq_db: Any, start_worker: Any
) -> None:
    task_id = cq.submit("demo.atomic_group", {"group": "cairnq-atomic-ok"}).id
    worker = start_worker("--burst")
    assert worker.wait() == 0
    task = Task.objects.get(id=task_id)
    assert (task.status, task.result) == ("succeeded", {"group": "cairnq-atomic-ok"})
    assert Group.objects.filter(name="cairnq-atomic-ok").exists()


def test_atomic_rolls_back_when_lease_is_gone(
    cairnq_db: Any, start_worker: Any, ledger_dir: Any, ledger: Any
) -> None:
    task_id = cq.submit(
        "demo.atomic_group", {"group": "cairnq-atomic-lost", "gate": True}
    ).id
    worker = start_worker()
    wait_until(lambda: [e for e in ledger() if e["event"] == "start"], 20, what="start")
    # Another owner takes the task while the handler waits at its gate.
    assert (
        Task.objects.filter(id=task_id, status="running").update(
            worker_id="worker_thief"
        )
        == 1
    )
    (ledger_dir / f"go-{task_id}").write_text("go")
    (end,) = wait_until(
        lambda: [e for e in ledger() if e["event"] == "end"], 20, what="end"
    )
    assert end["error"] == "LostLease"
    assert not Group.objects.filter(name="cairnq-atomic-lost").exists()
    task = Task.objects.get(id=task_id)
    assert (task.status, task.worker_id) == ("running", "worker_thief")
    assert worker.alive()


def test_children_carry_lineage(cairnq_db: Any, start_worker: Any) -> None:
    root = cq.submit(
        "demo.pipeline.ingest", {"doc": "d1", "text": "a" * 50 + "e" * 50, "chunk": 40}
    ).id
    worker = start_worker("--concurrency", "3")
    wait_until(
        lambda: Task.objects.filter(root_id=root, status="succeeded").count() == 5,
        30,
        what="pipeline",
    )
    children = list(Task.objects.filter(parent_id=root))
    assert {c.name for c in children} == {
        "demo.pipeline.embed",
        "demo.pipeline.summarize",
    }
    assert all(c.root_id == root for c in children)
    summary = next(c for c in children if c.name == "demo.pipeline.summarize")
    assert summary.result == {"doc": "d1", "vowels": [50, 50, 0, 0, 0]}
    assert worker.alive()


def test_leaked_context_writes_are_refused_after_settlement(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    """F21: a context kept past its handler cannot write or keep the lease alive."""
    task_id = cq.submit("demo.leaker", {"after": 0.3}).id
    worker = start_worker()
    late = wait_until(
        lambda: (
            len([e for e in ledger() if e["event"] == "late_write"]) == 2
            and [e for e in ledger() if e["event"] == "late_write"]
        ),
        20,
        what="late writes",
    )
    assert {(e["method"], e["refused"], e["error"]) for e in late} == {
        ("progress", True, "LostLease"),
        ("heartbeat", True, "LostLease"),
    }
    task = Task.objects.get(id=task_id)
    assert (task.status, task.progress, task.message, task.result) == (
        "succeeded",
        1.0,
        None,
        "returned",
    )
    assert worker.alive()
