"""Fixtures that run real ``manage.py cairnq_worker`` processes against the test database.

Workers start in their own session (``start_new_session=True``) so a test can
signal or ``kill -9`` the whole process group, and teardown kills whatever is
left. Readiness is observed (the banner in the worker's output, a ``start``
event in the ledger, a row's status), never assumed after a fixed sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 20.0,
    interval: float = 0.05,
    what: str = "",
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


class WorkerProcess:
    """A running worker subprocess and its captured output."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"worker {self.pid} still running after {timeout} s; output:\n{self.output()[-3000:]}"
            )

    def wait_ready(self, timeout: float = 20.0) -> str:
        """Wait for the start-up banner; return the worker id it names."""
        text = wait_until(
            lambda: "cairnq worker worker_" in self.output() or not self.alive(),
            timeout,
            what="worker banner",
        )
        out = self.output()
        assert "cairnq worker worker_" in out, f"worker exited early:\n{out[-3000:]}"
        del text
        return out.split("cairnq worker ", 1)[1].split()[0]

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Path:
    path = tmp_path / "ledger"
    path.mkdir()
    return path


def read_ledger(directory: Path) -> list[dict[str, Any]]:
    """Return every ledger event of every process, in wall-clock order."""
    events = []
    for file in directory.glob("*.jsonl"):
        for line in file.read_text().splitlines():
            if line.strip():
                events.append(json.loads(line))
    events.sort(key=lambda event: event["wall"])
    return events


@pytest.fixture
def ledger(ledger_dir: Path) -> Callable[[], list[dict[str, Any]]]:
    return lambda: read_ledger(ledger_dir)


@pytest.fixture
def start_worker(
    subprocess_env: dict[str, str], ledger_dir: Path, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``manage.py cairnq_worker *args``; ``overrides`` overlay CAIRNQ for that process.

    ``script`` replaces ``manage.py`` (a test's launcher that injects hooks).
    """
    started: list[WorkerProcess] = []

    def start(
        *args: str,
        overrides: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        script: str = "manage.py",
    ) -> WorkerProcess:
        environment = dict(subprocess_env)
        environment["LEDGER_DIR"] = str(ledger_dir)
        # Quick default beats and polls keep tests short; a test may override.
        merged = {"POLL_INTERVAL_MS": 100, **(overrides or {})}
        environment["CAIRNQ_TEST_OVERRIDES"] = json.dumps(merged)
        environment.setdefault("CAIRNQ_LOG_LEVEL", "DEBUG")
        environment.update(env or {})
        log = tmp_path / f"worker-{len(started)}.log"
        with log.open("wb") as handle:
            proc = subprocess.Popen(
                [sys.executable, script, "cairnq_worker", *args],
                cwd=REPO,
                env=environment,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProcess(proc, log)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.alive():
            worker.kill_group()


def intervals(
    events: list[dict[str, Any]], name_prefix: str | None = None
) -> dict[int, list[tuple[float, float, str]]]:
    """Pair start/end events per task attempt: {pid: [(start, end, name)]} (monotonic clock)."""
    opened: dict[tuple[int, str, int], dict[str, Any]] = {}
    out: dict[int, list[tuple[float, float, str]]] = {}
    for event in events:
        if name_prefix and not str(event.get("name", "")).startswith(name_prefix):
            continue
        key = (event["pid"], event.get("task_id", ""), event.get("attempt", 0))
        if event["event"] == "start":
            opened[key] = event
        elif event["event"] == "end" and key in opened:
            start = opened.pop(key)
            out.setdefault(event["pid"], []).append(
                (start["mono"], event["mono"], event["name"])
            )
    return out


def max_overlap(spans: list[tuple[float, float, str]]) -> int:
    """Return the most spans open at one instant (ends sort before starts at a tie)."""
    points = [(start, 1) for start, _, _ in spans] + [(end, -1) for _, end, _ in spans]
    points.sort(key=lambda point: (point[0], point[1]))
    most = now = 0
    for _, delta in points:
        now += delta
        most = max(most, now)
    return most
