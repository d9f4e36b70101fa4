"""Races and limits hold: per-process ceilings with several workers, with and
without kills (F24); cancel and retry racing claims and crashes (F25); admin
abuse -- no permission, no CSRF, huge selections, script payloads (F26);
concurrent ``migrate`` (F28); idempotent and transactional enqueue (F29)."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import cairnq_django as cq
from cairnq_django.models import Task

from ._invariants import fleet_peak
from .conftest import FULL, REPO_ROOT, starts, verify, wait_terminal, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

FAST = {"LEASE_MS": 2000, "HEARTBEAT_INTERVAL_MS": 500, "POLL_INTERVAL_MS": 50}
GPU_NAMES = ("demo.gpu", "demo.gpu_render")


def _claim_to_start_ms(outputs: list[str], events: list[dict[str, Any]]) -> list[float]:
    """Pair each DEBUG "task claimed" log line with its ledger start (ms)."""
    claimed: dict[tuple[str, int], float] = {}
    pattern = re.compile(r"^(\S+ \S+),(\d{3}) DEBUG \S+ task claimed: task=(\S+) name=\S+ attempt=(\d+)")
    for text in outputs:
        for line in text.splitlines():
            match = pattern.match(line)
            if match:
                stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
                claimed[(match.group(3), int(match.group(4)))] = stamp.timestamp() + int(match.group(2)) / 1000
    gaps = []
    for event in starts(events):
        at = claimed.get((event["task_id"], event["attempt"]))
        if at is not None:
            gaps.append((event["wall"] - at) * 1000)
    return sorted(gaps)


@pytest.mark.smoke
@pytest.mark.parametrize("kills", [0, 3], ids=["no-faults", "with-kills"])
def test_f24_ceilings_with_several_workers(
    cairnq_db: Any, dialect: str, supervisor: Any, ledger: Any, kills: int, figures: dict[str, Any]
) -> None:
    if kills and not FULL:
        pytest.skip("the kill variant runs with CAIRNQ_FAULTS=full")
    workers, total = (4, 3000) if FULL else (2, 500)
    rng = random.Random(24)
    names = ["demo.gpu_render", "demo.gpu", "demo.sleep"]
    items = [(names[i % 3], {"ms": rng.randint(5, 40)}) for i in range(total)]
    ids = [t.id for t in cq.submit_many(items, max_attempts=kills + 3)]
    sup = supervisor(workers, "--concurrency", "8", overrides={**FAST, "RESOURCES": {"gpu": 1}},
                     env={"CAIRNQ_LOG_LEVEL": "DEBUG"})
    for _ in range(kills):
        time.sleep(2.0)
        sup.kill_random()
    wait_terminal(ids, 240)
    events = ledger()
    outputs = [w.output() for w in sup.workers]
    codes = sup.stop()
    verdict = verify(
        events, ids, figures,
        lost_pids=set(sup.killed),
        ceilings={"demo.gpu_render": 2},
        resources={"gpu": (1, GPU_NAMES)},
    )
    if not kills:
        assert verdict.duplicates == 0  # without faults every task ran exactly once
        gaps = _claim_to_start_ms(outputs, events)
        assert len(gaps) > total * 0.9
        p99 = gaps[int(len(gaps) * 0.99) - 1]
        assert p99 < 100, f"claim-to-start p99 {p99:.0f} ms"
    # Resources are per process: fleet-wide gpu concurrency is bounded by the
    # number of processes, not by the capacity 1 (documented semantics).
    peak = fleet_peak(events, GPU_NAMES)
    assert 1 <= peak <= workers + len(sup.killed)
    assert codes == [0] * workers
    figures.update(
        faults=f"{kills} x kill -9" if kills else "none (ceiling check)",
        why=(f"fleet gpu peak {peak} over {workers} processes"
             + (f"; re-runs from {kills} killed workers" if kills else "; exactly once")),
    )


def test_f25_cancel_races_claim(cairnq_db: Any, start_worker: Any, ledger: Any, figures: dict[str, Any]) -> None:
    rounds = 1000 if FULL else 200
    worker = start_worker("--concurrency", "4", overrides=FAST)
    worker.wait_ready()
    rng = random.Random(25)
    answers: dict[str, str | None] = {}
    for _ in range(rounds):
        task_id = cq.submit("demo.sleep", {"ms": rng.choice([0, 2, 5])}).id
        time.sleep(rng.choice([0, 0, 0.001, 0.003, 0.006]))
        row = cq.cancel(task_id)
        answers[task_id] = None if row is None else row.status
    ids = list(answers)
    wait_terminal(ids, 60)
    final = {t.id: t for t in Task.objects.filter(id__in=ids)}
    started = {e["task_id"] for e in starts(ledger())}
    accepted_queued = [i for i, s in answers.items() if s == "canceled"]
    requested_running = [i for i, s in answers.items() if s == "running"]
    for task_id in accepted_queued:
        # Accepted while queued: never runs, never succeeds.
        assert final[task_id].status == "canceled" and task_id not in started
    for task_id in requested_running:
        assert final[task_id].status == "canceled"  # cancel wins over the outcome
    for task_id, answer in answers.items():
        if answer is None:
            assert final[task_id].status == "succeeded"
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    figures.update(
        tasks=rounds,
        faults=f"{rounds} cancel/claim races",
        why=f"{len(accepted_queued)} canceled queued, {len(requested_running)} while running, "
            f"{rounds - len(accepted_queued) - len(requested_running)} already done",
    )


@pytest.mark.smoke
def test_f25_cancel_running_then_succeed_fail_or_die_and_retry_running(
    cairnq_db: Any, supervisor: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    ids = {then: cq.submit("faults.cancelable", {"seconds": 30, "then": then}).id
           for then in ("return", "raise", "kill")}
    sup = supervisor(1, "--concurrency", "3", overrides=FAST)
    wait_until(lambda: len(starts(ledger())) == 3, 20, what="three starts")
    for task_id in ids.values():
        # Retry of a running task changes nothing.
        assert cq.retry(task_id) is None
        row = Task.objects.get(id=task_id)
        assert (row.status, row.attempt) == ("running", 1)
    for task_id in ids.values():
        assert cq.cancel(task_id).status == "running"
    wait_terminal(list(ids.values()), 20)
    for then, task_id in ids.items():
        row = Task.objects.get(id=task_id)
        assert row.status == "canceled", (then, row.status, row.error)
    assert any(code == -signal.SIGKILL for _, code in sup.exits)  # the "kill" one died
    assert sup.stop() == [0]
    figures.update(tasks=3, faults="cancel then return / raise / kill -9; retry while running",
                   why="cancel wins in every branch")


@pytest.mark.smoke
def test_f26_admin_abuse(cairnq_db: Any, figures: dict[str, Any]) -> None:
    """The cases tests/admin/test_actions.py pins in depth, abused together."""
    changelist = reverse("admin:cairnq_task_changelist")
    script = cq.submit("demo.noop", {"html": "<script>alert(1)</script>"}).id
    queued = cq.submit("demo.noop", {}).id
    # Anonymous: sent to the login page.
    anonymous = Client().get(changelist)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    # View-only staff: no action offered; a forged POST changes nothing.
    from django.contrib.auth.models import Permission

    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_task"))
    client = Client()
    client.force_login(viewer)
    page = client.get(changelist)
    assert page.status_code == 200 and b"cancel_tasks" not in page.content
    assert b"<script>alert(1)</script>" not in page.content and b"&lt;script&gt;" in page.content
    client.post(changelist, {"action": "cancel_tasks", "_selected_action": [queued], "index": "0"})
    client.post(changelist, {"action": "delete_selected", "_selected_action": [queued], "index": "0"})
    assert Task.objects.get(id=queued).status == "queued"
    # Superuser without a CSRF token: 403 and nothing changes.
    root = User.objects.create_superuser("root", password="pw")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(root)
    forged = strict.post(changelist, {"action": "cancel_tasks", "_selected_action": [queued], "index": "0"})
    assert forged.status_code == 403 and Task.objects.get(id=queued).status == "queued"
    # Add, change and delete are denied even to a superuser.
    loose = Client()
    loose.force_login(root)
    assert loose.get(reverse("admin:cairnq_task_add")).status_code == 403
    assert loose.post(reverse("admin:cairnq_task_change", args=[script]), {"name": "x"}).status_code == 403
    assert loose.post(reverse("admin:cairnq_task_delete", args=[script]), {"post": "yes"}).status_code == 403
    detail = loose.get(reverse("admin:cairnq_task_change", args=[script]))
    assert b"<script>alert(1)</script>" not in detail.content
    assert Task.objects.get(id=script).name == "demo.noop"
    # select_across over many rows: a bounded number of guarded UPDATEs.
    n = 100_000 if FULL else 5_000
    cq.submit_many([("demo.bulk", {})] * n, queue="bulk")
    with CaptureQueriesContext(connections["default"]) as queries:
        loose.post(changelist + "?queue=bulk",
                   {"action": "cancel_tasks", "_selected_action": [queued], "select_across": "1", "index": "0",
                    "post": "yes"})
    assert Task.objects.filter(queue="bulk", status="canceled").count() == n
    updates = [q for q in queries.captured_queries if re.search(r"\bUPDATE\s+cairnq_tasks\b", q["sql"])]
    assert len(updates) == -(-n // 1000)  # one statement per 1000 ids, never one per row
    assert Task.objects.get(id=queued).status == "queued"  # outside the filter
    figures.update(tasks=n + 2, faults=f"anon/view-only/no-CSRF/forged posts; select_across {n}",
                   why=f"{len(updates)} UPDATE statements for {n} rows")


def _migrate(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "manage.py", "migrate", "-v", "0"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


def test_f28_concurrent_migrate_and_worker_before_migrate(
    cairnq_db: Any, dialect: str, subprocess_env: dict[str, str], tmp_path: Path, figures: dict[str, Any]
) -> None:
    env = dict(subprocess_env)
    if dialect == "sqlite":
        env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
    else:
        name = f"{connection.settings_dict['NAME']}_mig"
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
            cursor.execute(f'CREATE DATABASE "{name}"')
        env["DATABASE_URL"] = env["DATABASE_URL"].rsplit("/", 1)[0] + "/" + name
    try:
        # (c) A worker started before migrate says what to do and exits 1.
        early = subprocess.run([sys.executable, "manage.py", "cairnq_worker"], cwd=REPO_ROOT, env=env,
                               check=False, capture_output=True, text=True, timeout=60)
        assert early.returncode == 1
        assert "manage.py migrate" in early.stderr + early.stdout
        assert "Traceback" not in early.stderr
        # (a) Two migrate processes at once.
        first, second = _migrate(env), _migrate(env)
        outputs = [proc.communicate(timeout=180)[0].decode() for proc in (first, second)]
        codes = [first.returncode, second.returncode]
        assert 0 in codes, outputs
        for code, out in zip(codes, outputs):
            if code != 0:  # the loser fails with a database error, not silently
                assert "Error" in out, out[-2000:]
        check = subprocess.run([sys.executable, "manage.py", "migrate", "--check"], cwd=REPO_ROOT, env=env,
                               check=False, capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, check.stdout + check.stderr
        rerun = subprocess.run([sys.executable, "manage.py", "migrate"], cwd=REPO_ROOT, env=env,
                               check=False, capture_output=True, text=True, timeout=120)
        assert rerun.returncode == 0 and "No migrations to apply" in rerun.stdout
        burst = subprocess.run([sys.executable, "manage.py", "cairnq_worker", "--burst"], cwd=REPO_ROOT,
                               env=env, check=False, capture_output=True, text=True, timeout=60)
        assert burst.returncode == 0, burst.stderr[-2000:]
        figures.update(faults="2 x migrate at once; worker before migrate",
                       why=f"migrate exit codes {codes}")
    finally:
        if dialect == "postgres":
            connections.close_all()
            with connection.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.smoke
def test_f29_idempotent_and_transactional_enqueue(
    cairnq_db: Any, dialect: str, start_worker: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    # 20 threads submit the same key at once: one task.
    got: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(20)

    def submit() -> None:
        try:
            barrier.wait()
            got.append(cq.submit("demo.sleep", {"ms": 1}, key="same-key").id)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=submit) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(got) == 20 and len(set(got)) == 1
    keyed = got[0]
    # A submit in a transaction that rolls back never exists.
    with pytest.raises(RuntimeError), transaction.atomic():
        ghost = cq.submit("demo.sleep", {"ms": 1}).id
        raise RuntimeError("roll back")
    assert not Task.objects.filter(id=ghost).exists()
    # A worker cannot see a task before its transaction commits.
    worker = start_worker(overrides=FAST)
    worker.wait_ready()
    wait_terminal([keyed], 20)
    with transaction.atomic():
        pending = cq.submit("demo.sleep", {"ms": 1}).id
        time.sleep(1.0 if dialect == "postgres" else 0.3)
        committed_at = time.time()
    wait_terminal([pending], 20)
    start = [e for e in starts(ledger()) if e["task_id"] == pending]
    assert start and start[0]["wall"] >= committed_at
    assert ghost not in {e["task_id"] for e in starts(ledger())}
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    figures.update(tasks=3, faults="20 concurrent keyed submits; rollback; open transaction",
                   why="")
