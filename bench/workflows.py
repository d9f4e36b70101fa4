"""What a workflow costs next to the same tasks submitted plain (issue 36; figures in docs/performance.md).

    .venv/bin/python bench/workflows.py                      # PostgreSQL (127.0.0.1:5432), full sizes
    .venv/bin/python bench/workflows.py --dialect sqlite --quick

Four figures, each beside its plain-task twin measured in the same run:

* ``hop``: a chain of 100 steps run by one worker; a hop is a step's start
  minus its parent's end (handler-side clock, the test project's ledger).
  Its twin is the pickup latency of plain tasks submitted one at a time to
  the same idle worker (start minus the submit's return).
* ``fan-out``: a group of 10,000 nodes against 10,000 tasks submitted plain,
  each drained by a fresh worker (``--concurrency 4``) started after the
  submit: tasks a second from the worker's launch to the last end.
* ``chord``: a chord of 10,000 header steps and one callback: the callback's
  start minus the last header task's end.
* ``statements``: the statements one header step's end costs a chord of
  100, 1,000 and 10,000 (the same, by design: a count-down).

Handlers are the test project's ``demo.sleep`` (``ms`` 0; it writes each
start and end to the ledger) and ``demo.noop``. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = str(REPO / ".venv" / "bin" / "python")
QUEUE = "wfbench"


def env_for(dialect: str, ledger_dir: Path, workdir: Path) -> dict[str, str]:
    env = dict(os.environ, LEDGER_DIR=str(ledger_dir), DJANGO_SETTINGS_MODULE="testproject.settings")
    if dialect == "postgres":
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "root", "-d", "postgres", "-qc",
                        "DROP DATABASE IF EXISTS bench_workflows"], check=True)
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "root", "-d", "postgres", "-qc",
                        "CREATE DATABASE bench_workflows"], check=True)
        env["DATABASE_URL"] = "postgres://root@127.0.0.1:5432/bench_workflows"
    else:
        env["DATABASE_URL"] = f"sqlite:///{workdir / 'workflows.sqlite3'}"
    return env


def events(ledger_dir: Path) -> list[dict[str, Any]]:
    found = []
    for file in ledger_dir.glob("*.jsonl"):
        found += [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    return sorted(found, key=lambda event: event["wall"])


def worker(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [PYTHON, "manage.py", "cairnq_worker", "--queue", QUEUE, *args],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.002)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def hop_latency(env: dict[str, str], ledger_dir: Path, steps: int, plain: int) -> dict[str, float]:
    import cairnq_django as cq

    proc = worker(env, "--concurrency", "1")
    try:
        # Warm: the worker is up and idle once a first task ran.
        cq.submit("demo.sleep", {"ms": 0}, queue=QUEUE)
        wait_for(lambda: len(events(ledger_dir)) >= 2, 60, "the worker's first task")
        time.sleep(0.5)
        pickups = []
        for _ in range(plain):
            seen = len(events(ledger_dir))
            task = cq.submit("demo.sleep", {"ms": 0}, queue=QUEUE)
            submitted = time.time()
            wait_for(lambda: len(events(ledger_dir)) >= seen + 2, 30, "a plain task")
            start = next(e for e in events(ledger_dir) if e["event"] == "start" and e["task_id"] == task.id)
            pickups.append((start["wall"] - submitted) * 1000)
            time.sleep(0.02)
        run = cq.chain(*(cq.signature("demo.sleep", {"ms": 0}, queue=QUEUE) for _ in range(steps))).submit()
        run.wait(timeout=120)
        order = [run.nodes()[name].task_id for name in _chain_names(steps)]
        by_task = {(e["task_id"], e["event"]): e["wall"] for e in events(ledger_dir) if e.get("task_id")}
        hops = [(by_task[(child, "start")] - by_task[(parent, "end")]) * 1000 for parent, child in zip(order, order[1:])]
    finally:
        stop(proc)
    return {
        "hop_p50_ms": statistics.median(hops),
        "hop_p95_ms": percentile(hops, 0.95),
        "pickup_p50_ms": statistics.median(pickups),
        "pickup_p95_ms": percentile(pickups, 0.95),
    }


def _chain_names(steps: int) -> list[str]:
    return ["demo.sleep"] + [f"demo.sleep-{i}" for i in range(2, steps + 1)]


def fan_out(env: dict[str, str], n: int) -> dict[str, float]:
    import cairnq_django as cq
    from cairnq_django.models import Task

    rates = {}
    for kind in ("plain", "workflow", "plain", "workflow"):
        Task.objects.filter(queue=QUEUE).delete()
        if kind == "plain":
            cq.submit_many([("demo.noop", {}) for _ in range(n)], queue=QUEUE)
        else:
            cq.group(cq.signature("demo.noop", {}, queue=QUEUE) for _ in range(n)).submit()
        launched = time.monotonic()
        proc = worker(env, "--concurrency", "4")
        try:
            wait_for(lambda: not Task.objects.filter(queue=QUEUE).exclude(status="succeeded").exists(), 600, kind)
            # A workflow's last node ends after its task: wait for the run's count-down too.
            if kind == "workflow":
                from cairnq_django.workflows.models import WorkflowRun

                wait_for(lambda: not WorkflowRun.objects.filter(nodes_left__gt=0).exists(), 60, "the run's end")
            rate = n / (time.monotonic() - launched)
        finally:
            stop(proc)
        rates.setdefault(kind, []).append(rate)
    plain, flow = statistics.median(rates["plain"]), statistics.median(rates["workflow"])
    return {"plain_per_s": plain, "workflow_per_s": flow, "ratio": flow / plain}


def chord_callback(env: dict[str, str], ledger_dir: Path, width: int) -> dict[str, float]:
    import cairnq_django as cq
    from cairnq_django.models import Task

    proc = worker(env, "--concurrency", "4")
    try:
        run = cq.chord(
            (cq.signature("demo.noop", {}, queue=QUEUE) for _ in range(width)),
            cq.signature("demo.sleep", {"ms": 0}, queue=QUEUE),
        ).submit()
        run.wait(timeout=600)
        callback = run.nodes()["demo.sleep"].task_id
        start = next(e["wall"] for e in events(ledger_dir) if e["event"] == "start" and e.get("task_id") == callback)
        last_header_ms = max(
            Task.objects.filter(correlation_id=run.id, name="demo.noop").values_list("completed_at_ms", flat=True)
        )
    finally:
        stop(proc)
    return {"callback_after_last_header_ms": start * 1000 - last_header_ms}


def statements_per_parent(widths: list[int]) -> dict[str, int]:
    import cairnq_django as cq
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from cairnq_django.store import get_store
    from cairnq_django.workflows import advance

    store = get_store()
    found = {}
    for width in widths:
        cq.chord([cq.signature("demo.noop", {}, queue="wfcount") for _ in range(width)], cq.signature("demo.noop", queue="wfcount")).submit()
        [first] = store.claim(["wfcount"], "worker_bench", lease_ms=60_000)
        store.complete(first.id, "worker_bench", None)
        with CaptureQueriesContext(connection) as queries:
            advance.tasks_ended(store.alias, [(first.id, "succeeded")])
        found[str(width)] = len(queries)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dialect", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--quick", action="store_true", help="smaller sizes: a smoke run")
    args = parser.parse_args()
    steps, plain, n, width = (20, 20, 1_000, 1_000) if args.quick else (100, 100, 10_000, 10_000)
    widths = [100, 1_000] if args.quick else [100, 1_000, 10_000]
    with tempfile.TemporaryDirectory(prefix="wfbench-") as tmp:
        workdir = Path(tmp)
        ledger_dir = workdir / "ledger"
        ledger_dir.mkdir()
        env = env_for(args.dialect, ledger_dir, workdir)
        subprocess.run([PYTHON, "manage.py", "migrate", "-v", "0"], cwd=REPO, env=env, check=True)
        os.environ.update(env)
        sys.path.insert(0, str(REPO))
        import django

        django.setup()
        result = {
            "dialect": args.dialect,
            "hop": hop_latency(env, ledger_dir, steps, plain),
            "fan_out": fan_out(env, n),
            "chord": chord_callback(env, ledger_dir, width),
            "statements_per_parent": statements_per_parent(widths),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
