"""Process crashes lose nothing: ``kill -9`` of workers mid-run (F01), inside
the claim transaction (F02), after the side effect (F03), a poison task that
kills its worker on every attempt (F04), a memory limit (F05a), the kernel
OOM killer in a memory cgroup (F05b) and handlers
that raise ``SystemExit``/``KeyboardInterrupt`` or call ``os._exit`` (F06).
Re-runs happen only where a process died holding the lease (at-least-once)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import (
    FULL,
    Supervisor,
    WorkerProcess,
    final_rows,
    starts,
    verify,
    wait_terminal,
    wait_until,
)

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

FAST = {"LEASE_MS": 2000, "HEARTBEAT_INTERVAL_MS": 500, "POLL_INTERVAL_MS": 50}


@pytest.mark.smoke
def test_f01_kill9_workers_mid_run(
    cairnq_db: Any, supervisor: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    total, kills, every = (1000, 10, 2.0) if FULL else (200, 3, 1.2)
    rng = random.Random(1)
    # max_attempts above the number of kills: an unlucky task may sit on
    # several killed workers in a row, and after max_attempts lost leases it
    # would end failed/lease_expired (visible, retryable) -- not lost, but not
    # what this case measures.
    ids = [
        t.id
        for t in cq.submit_many(
            [("demo.sleep", {"ms": rng.randint(50, 300)}) for _ in range(total)], max_attempts=kills + 1
        )
    ]
    sup = supervisor(4 if FULL else 2, "--concurrency", "4", overrides=FAST)
    wait_until(lambda: starts(ledger()), 30, what="first start")
    killed_at: list[tuple[int, float]] = []
    for _ in range(kills):
        time.sleep(every)
        killed_at.append((sup.kill_random(), time.time()))
    last_kill = time.time()
    wait_terminal(ids, 120)
    events = ledger()
    lost = {pid for pid, _ in killed_at}
    # Extra starts are bounded by what the killed pids had in flight at the kill:
    # handlers still running, plus handlers that had just returned but whose
    # completion the settler had not committed yet (settlement is batched, so
    # it trails the handler's end by a statement; 1 s is a generous window).
    in_flight = 0
    for pid, at in killed_at:
        begun = {(e["task_id"], e["attempt"]) for e in events if e["pid"] == pid and e["event"] == "start"}
        settled = {
            (e["task_id"], e["attempt"])
            for e in events
            if e["pid"] == pid and e["event"] == "end" and e["wall"] < at - 1.0
        }
        in_flight += len(begun - settled)
    verdict = verify(events, ids, figures, lost_pids=lost)
    assert verdict.duplicates <= in_flight, (verdict.duplicates, in_flight)
    # attempt counts claims: never fewer than the attempts that started.
    rows = {r.id: r for r in final_rows(ids)}
    for event in starts(events):
        assert rows[event["task_id"]].attempt >= event["attempt"]
    # Nothing of a killed worker is running 2 x lease after the last kill.
    # Only a live worker's claim takes a row off a dead one, so once none is
    # left none comes back: no need to sleep out the 2 x lease first.
    dead_ids = {e["worker_id"] for e in events if e["pid"] in lost}
    wait_until(
        lambda: not Task.objects.filter(status="running", worker_id__in=dead_ids).exists(),
        max(0.1, last_kill + 2 * FAST["LEASE_MS"] / 1000 - time.time()),
        what="no row left running on a killed worker",
    )
    codes = sup.stop()
    assert all(code == 0 for code in codes), codes
    figures.update(
        faults=f"{kills} x kill -9 (process group)",
        why=f"re-runs of the {in_flight} tasks in flight on killed workers",
    )


def _idle_in_transaction(worker_ids: list[str]) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'"
            " AND application_name = ANY(%s)",
            [[f"cairnq_worker:{w}" for w in worker_ids]],
        )
        return cursor.fetchone()[0] > 0


def test_f02_kill9_inside_the_claim_transaction(
    cairnq_db: Any, dialect: str, start_worker: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    ids = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 20}) for _ in range(20)])]
    # The victim sleeps 30 s between its locking claim and COMMIT (a claim
    # hook its launcher injects).
    victim = start_worker(
        "--concurrency", "4", overrides={**FAST, "LEASE_MS": 30_000},
        script=str(Path(__file__).with_name("_paused_worker.py")),
    )
    victim_id = victim.wait_ready()
    if dialect == "postgres":
        wait_until(lambda: _idle_in_transaction([victim_id]), 20, what="victim idle in transaction")
        # Another worker skips the locked rows meanwhile and runs the rest.
        helper = start_worker("--concurrency", "2", overrides={**FAST, "LEASE_MS": 30_000})
        helper.wait_ready()
        wait_until(
            lambda: Task.objects.filter(id__in=ids, status="succeeded").count() >= len(ids) - 4,
            30, what="the unlocked rows done",
        )
        locked = Task.objects.filter(id__in=ids, status="queued").count()
        assert locked >= 1  # still held by the victim's open transaction
        killed = time.monotonic()
        victim.kill_group()
    else:
        # SQLite: the victim holds BEGIN IMMEDIATE (the write lock) while it sleeps.
        time.sleep(2.0)
        helper = None
        victim.kill_group()
        killed = time.monotonic()
        helper = start_worker("--concurrency", "2", overrides={**FAST, "LEASE_MS": 30_000})
    # The rows were never committed as running: taken at once, no 30 s lease wait.
    wait_terminal(ids, 15)
    assert time.monotonic() - killed < 15
    assert not starts([e for e in ledger() if e["pid"] == victim.pid])
    verify(ledger(), ids, figures)
    assert all(r.attempt == 1 for r in final_rows(ids))
    helper.signal(signal.SIGTERM)
    assert helper.wait(10) == 0
    figures.update(faults="kill -9 with the claim transaction open", why="none: the claim never committed")


@pytest.mark.smoke
def test_f03_crash_after_the_side_effect(
    cairnq_db: Any, start_worker: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    task_id = cq.submit("demo.kill_once", {}).id
    first = start_worker(overrides=FAST)
    assert first.wait(30) == -signal.SIGKILL
    row = Task.objects.get(id=task_id)
    assert (row.status, row.attempt) == ("running", 1)
    second = start_worker(overrides=FAST)
    wait_terminal([task_id], 20)
    row = Task.objects.get(id=task_id)
    assert (row.status, row.attempt, row.result) == ("succeeded", 2, {"attempt": 2})
    events = ledger()
    # At-least-once, asserted: the side effect happened twice.
    assert [e["attempt"] for e in events if e["event"] == "effect"] == [1, 2]
    verify(events, [task_id], figures, lost_pids={first.pid})
    second.signal(signal.SIGTERM)
    assert second.wait(10) == 0
    figures.update(faults="SIGKILL after the effect", why="attempt 1 died after its side effect")


def test_f04_poison_task_kills_its_worker_every_time(
    cairnq_db: Any, supervisor: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    poison = cq.submit("faults.poison", {}, max_attempts=3).id
    ids = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 30}) for _ in range(100)])]
    # Concurrency 1: a task running beside the poison dies with it and loses an
    # attempt each time (documented); alone, the poison hurts only itself.
    sup = supervisor(1, "--concurrency", "1", overrides={**FAST, "RETRY_BACKOFF_MS": 1000})
    wait_terminal([poison, *ids], 90)
    row = Task.objects.get(id=poison)
    assert (row.status, row.attempt) == ("failed", 3)
    assert row.error["code"] == "lease_expired"
    events = ledger()
    poison_starts = [e for e in starts(events) if e["task_id"] == poison]
    assert [e["attempt"] for e in poison_starts] == [1, 2, 3]
    crash_pids = {pid for pid, code in sup.exits if code == -signal.SIGKILL}
    assert {e["pid"] for e in poison_starts} <= crash_pids
    # Crash loop over: exactly three deaths, the last worker is alive and idle.
    time.sleep(1.0)
    assert len(sup.exits) == 3 and sup.workers[0].alive()
    verify(
        events, [poison, *ids], figures,
        expected={**{i: "succeeded" for i in ids}, poison: "failed"},
        lost_pids=crash_pids,
    )
    assert sup.stop() == [0]
    figures.update(faults="3 self-SIGKILLs", why="the poison task's own 3 attempts")


def test_f04_recovered_task_goes_behind_due_work(cairnq_db: Any, start_worker: Any) -> None:
    """A lease-recovered task re-enters with ``run_at`` = recovery time (protocol 3.9),
    so every task already due is claimed before it: it does not jump the queue."""
    from cairnq_django.store import get_store

    poison = cq.submit("faults.poison", {}, max_attempts=3).id
    worker = start_worker("--task", "faults.poison", overrides=FAST)
    assert worker.wait(30) == -signal.SIGKILL
    ordinary = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 1}) for _ in range(5)])]
    store = get_store()
    wait_until(lambda: store.recover_leases() >= 1, 10, what="lease expiry")
    row = Task.objects.get(id=poison)
    assert (row.status, row.attempt, row.worker_id) == ("queued", 1, None)
    due_before = Task.objects.filter(id__in=ordinary).values_list("run_at_ms", flat=True)
    assert row.run_at_ms > max(due_before)
    claimed = store.claim(["default"], "worker_probe", lease_ms=5000, limit=5)
    assert {t.id for t in claimed} == set(ordinary)


def test_f05a_memory_error_is_the_tasks_failure(
    cairnq_db: Any, start_worker: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit missing")
    worker = start_worker(overrides=FAST)
    worker.wait_ready()
    # Cap the running worker's address space (prlimit --pid), then send the hog.
    subprocess.run(["prlimit", f"--pid={worker.pid}", f"--as={1536 << 20}"], check=True)
    hog = cq.submit("faults.memory_hog", {"mb": 2048}, max_attempts=1).id
    after = cq.submit("demo.sleep", {"ms": 10}).id
    wait_terminal([hog, after], 30)
    row = Task.objects.get(id=hog)
    assert (row.status, row.error["type"]) == ("failed", "MemoryError")
    assert Task.objects.get(id=after).status == "succeeded"
    assert worker.alive()
    figures.update(tasks=2, faults="MemoryError under prlimit --as", why="")


CGROUP_LIMIT = 256 << 20  # the plan's MemoryMax=256M


def _memory_mount() -> Path | None:
    """Where the cgroup v1 memory controller is mounted, or None."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "cgroup" and "memory" in fields[3].split(","):
            return Path(fields[1])
    return None


def _own_memory_cgroup(mount: Path) -> Path:
    """This process's memory cgroup: the new group nests below it, inside its accounting."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            own = mount / path.lstrip("/")
            return own if own.is_dir() else mount
    return mount


def _swap_on() -> bool:
    return len(Path("/proc/swaps").read_text().splitlines()) > 1


class MemoryCgroup:
    """A cgroup v1 memory group of this test's own, capped at ``CGROUP_LIMIT`` without swap."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self, name: str) -> str:
        return (self.path / name).read_text()

    def pids(self) -> list[int]:
        return [int(pid) for pid in self.read("cgroup.procs").split()]

    def join(self, worker: WorkerProcess) -> WorkerProcess:
        """Move a just-started worker in (all its threads; it is still importing Django)."""
        (self.path / "cgroup.procs").write_text(str(worker.pid))
        return worker

    def oom_kills(self) -> int | None:
        """The kernel's count of OOM kills in this group (``oom_kill``, Linux >= 4.13)."""
        fields = dict(line.split() for line in self.read("memory.oom_control").splitlines())
        return int(fields["oom_kill"]) if "oom_kill" in fields else None


@pytest.fixture
def memory_cgroup() -> Iterator[MemoryCgroup]:
    """Create the group (or skip saying why), then remove it once its workers are gone."""
    mount = _memory_mount()
    if mount is None:
        pytest.skip("F05b needs the cgroup v1 memory controller, which is not mounted here")
    path = _own_memory_cgroup(mount) / f"cairnq-f05b-{os.getpid()}"
    try:
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(CGROUP_LIMIT))
        memsw = path / "memory.memsw.limit_in_bytes"
        if memsw.exists():
            memsw.write_text(str(CGROUP_LIMIT))  # memory + swap: no escape into swap
        elif _swap_on():
            raise OSError("swap is on and memory.memsw is missing: the hog would swap, not die")
    except OSError as exc:
        if path.is_dir():
            path.rmdir()
        pytest.skip(f"cannot set up a 256 MiB memory cgroup at {path}: {exc}")
    group = MemoryCgroup(path)
    try:
        yield group
    finally:
        # Only this test's workers are in the group: kill what is left, then rmdir
        # (EBUSY until the kernel has let the last one go).
        deadline = time.monotonic() + 10
        while True:
            for pid in group.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                path.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def test_f05b_oom_killer_in_a_memory_cgroup_acts_like_a_poison_task(
    cairnq_db: Any, memory_cgroup: MemoryCgroup, start_worker: Any, ledger: Any,
    figures: dict[str, Any],
) -> None:
    hog = cq.submit("faults.memory_hog", {"mb": 1024}, max_attempts=3).id
    ids = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 30}) for _ in range(20)])]
    # Like F04, one worker at concurrency 1 that a supervisor restarts; every
    # incarnation is moved into the 256 MiB group before it can claim. The hog
    # fills its 1 GiB bytearray with zeros, so its RSS really grows past the cap.
    sup = Supervisor(
        lambda: memory_cgroup.join(
            start_worker("--concurrency", "1", overrides={**FAST, "RETRY_BACKOFF_MS": 1000})
        ),
        1,
    )
    try:
        wait_terminal([hog, *ids], 90)
        row = Task.objects.get(id=hog)
        assert (row.status, row.attempt) == ("failed", 3)
        assert row.error["code"] == "lease_expired"
        events = ledger()
        hog_starts = [e for e in starts(events) if e["task_id"] == hog]
        assert [e["attempt"] for e in hog_starts] == [1, 2, 3]
        assert not [e for e in events if e.get("task_id") == hog and e["event"] == "end"]
        # Each attempt's worker died of SIGKILL, and the kernel says it sent them.
        crash_pids = {pid for pid, code in sup.exits if code == -signal.SIGKILL}
        assert {e["pid"] for e in hog_starts} <= crash_pids
        oom_kills = memory_cgroup.oom_kills()
        assert oom_kills is None or oom_kills == 3, memory_cgroup.read("memory.oom_control")
        # Crash loop over: exactly three deaths, the last worker is alive and idle.
        time.sleep(1.0)
        assert len(sup.exits) == 3 and sup.workers[0].alive()
        assert sup.workers[0].pid in memory_cgroup.pids()
        verify(
            events, [hog, *ids], figures,
            expected={**{i: "succeeded" for i in ids}, hog: "failed"},
            lost_pids=crash_pids,
        )
        assert sup.stop() == [0]
    finally:
        sup._stop.set()
    figures.update(
        faults="3 OOM kills (1 GiB hog, cgroup v1 memory limit 256 MiB)",
        why="the hog task's own 3 attempts",
    )


@pytest.mark.parametrize("kind", ["exit", "interrupt"])
def test_f06_systemexit_and_keyboardinterrupt_fail_the_task(
    cairnq_db: Any, start_worker: Any, ledger: Any, kind: str, figures: dict[str, Any]
) -> None:
    bad = cq.submit("faults.raise_base", {"kind": kind}, max_attempts=1).id
    after = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 10}) for _ in range(5)])]
    worker = start_worker(overrides=FAST)
    wait_terminal([bad, *after], 30)
    row = Task.objects.get(id=bad)
    assert row.status == "failed"
    assert row.error["type"] == ("SystemExit" if kind == "exit" else "KeyboardInterrupt")
    assert worker.alive()  # and it kept claiming
    verify(ledger(), after, figures)
    figures.update(tasks=6, faults=f"handler raises {row.error['type']}", why="")
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0


def test_f06_os_exit_follows_lease_recovery(
    cairnq_db: Any, supervisor: Any, ledger: Any, figures: dict[str, Any]
) -> None:
    task_id = cq.submit("faults.os_exit", {"code": 3}).id
    sup = supervisor(1, overrides=FAST)
    wait_terminal([task_id], 30)
    assert (3 in [code for _, code in sup.exits])
    row = Task.objects.get(id=task_id)
    assert (row.status, row.attempt) == ("succeeded", 2)
    verify(ledger(), [task_id], figures, lost_pids={pid for pid, _ in sup.exits})
    assert sup.stop() == [0]
    figures.update(faults="os._exit(3)", why="attempt 1 exited the process")
