"""Clock skew cannot make a worker run work early or steal live leases
(F27): on PostgreSQL the database clock decides, whatever the hosts' clocks
say (two workers 10 minutes ahead and behind); on SQLite, where each process
supplies "now", every worker's clock stepping back 10 minutes mid-run causes
no negative lease and no mass recovery. The wall clock is shifted inside each
worker by ``_skew/sitecustomize.py`` (``time.time`` only, as an NTP step
does): libfaketime also shifts the monotonic clock Python's timed waits use,
which stalls threads for the offset (or fails with EINVAL), a harness artifact."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import starts, verify, wait_terminal, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

SKEW = Path(__file__).resolve().parent / "_skew"
FAST = {"LEASE_MS": 2000, "HEARTBEAT_INTERVAL_MS": 500, "POLL_INTERVAL_MS": 50}


def _skewed(subprocess_env: dict[str, str], **clock: str) -> dict[str, str]:
    env = {"PYTHONPATH": f"{SKEW}{os.pathsep}{subprocess_env['PYTHONPATH']}"}
    env.update(clock)
    return env


def test_f27_pg_skewed_hosts_follow_the_database_clock(
    cairnq_db: Any, dialect: str, start_worker: Any, ledger: Any, figures: dict[str, Any],
    subprocess_env: dict[str, str],
) -> None:
    if dialect != "postgres":
        pytest.skip("the multi-clock variant needs the database clock (PostgreSQL)")
    submitted = time.time()
    delayed = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 10})] * 20, delay_ms=3000)]
    long = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 2500})] * 4)]
    ahead = start_worker("--concurrency", "4", overrides=FAST, env=_skewed(subprocess_env, CAIRNQ_TEST_CLOCK_OFFSET_S="600"))
    behind = start_worker("--concurrency", "4", overrides=FAST, env=_skewed(subprocess_env, CAIRNQ_TEST_CLOCK_OFFSET_S="-600"))
    ahead.wait_ready(), behind.wait_ready()
    wait_terminal(delayed + long, 40)
    offsets = {ahead.pid: 600.0, behind.pid: -600.0}
    events = ledger()
    for event in starts(events):
        if event["task_id"] in delayed:
            real = event["wall"] - offsets[event["pid"]]
            assert real >= submitted + 3.0 - 0.05, "a scheduled task ran early"
    # Neither recovered the other's live leases: every task ran exactly once.
    verdict = verify(events, delayed + long, figures)
    assert verdict.duplicates == 0
    assert "+600.0 s off the database" in ahead.output()
    assert "-600.0 s off the database" in behind.output()
    for worker in (ahead, behind):
        worker.signal(signal.SIGTERM)
        assert worker.wait(10) == 0
    figures.update(faults="worker clocks +600 s and -600 s", why="exactly once")


def test_f27_sqlite_every_worker_clock_steps_back(
    cairnq_db: Any, dialect: str, start_worker: Any, ledger: Any, tmp_path: Path,
    figures: dict[str, Any], subprocess_env: dict[str, str],
) -> None:
    if dialect != "sqlite":
        pytest.skip("the single-clock variant is SQLite's")
    clock = tmp_path / "clock"
    clock.write_text("0")
    ids = [t.id for t in cq.submit_many([("demo.sleep", {"ms": 3000})] * 8)]
    env = _skewed(subprocess_env, CAIRNQ_TEST_CLOCK_FILE=str(clock))
    workers = [start_worker("--concurrency", "4", overrides=FAST, env=env) for _ in range(2)]
    wait_until(lambda: len(starts(ledger())) == 8, 30, what="all eight running")
    clock.write_text("-600")  # every worker's wall clock steps back 10 minutes
    wait_terminal(ids, 30)
    verdict = verify(ledger(), ids, figures)
    assert verdict.duplicates == 0  # no mass recovery
    for row in Task.objects.filter(id__in=ids):
        # Completed by the stepped-back clock; no lease left behind.
        assert row.lease_until_ms is None and row.completed_at_ms is not None
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait(10) == 0
    figures.update(faults="every worker clock steps back 600 s mid-run", why="exactly once")
