"""Claiming ahead on a mix of long and short tasks: does a short task ever wait behind a long one?

    .venv/bin/python bench/claim_ahead_mix.py                     # auto, then a fixed 63, on PostgreSQL
    .venv/bin/python bench/claim_ahead_mix.py --modes auto --long-s 10 --short 2000

Four worker processes at ``--concurrency 1`` (the test project's
``demo.sleep``, which writes each start and end to a ledger) drain a queue
holding a few long tasks among many 1 ms ones, the long ones spread through
it. The workers first learn the name on a warm-up of short tasks, so the
long tasks come as a surprise, as a short name that sometimes runs long does
in production. Reported per mode:

* ``short stuck``: short tasks that ended after a long task ended, having
  waited claimed ahead behind it (the other workers had long run out of
  work by then);
* ``last short done`` and ``last long done``: when they ended, from the
  moment the mix was submitted.

``MIX_DEBUG=1`` also prints each long task's worker and times, and each
worker's count of tasks and last end.

The target (issue 34): with ``auto``, no short task stuck and the last short
task done long before the long ones; a fixed 63 shows what it prevents.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = str(REPO / ".venv" / "bin" / "python")
WORKERS = 4


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([PYTHON, "manage.py", *args], cwd=REPO, env=env, check=True, capture_output=True)


def submit(env: dict[str, str], specs: list[tuple[str, dict[str, int]]]) -> None:
    code = (
        "import json, sys, cairnq_django as cq; "
        "cq.submit_many([(n, p) for n, p in json.load(sys.stdin)], queue='mix')"
    )
    subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", code], cwd=REPO, env=env, check=True, input=json.dumps(specs).encode()
    )


def ledger(directory: Path) -> list[dict]:
    events = []
    for file in directory.glob("*.jsonl"):
        events += [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    return sorted(events, key=lambda event: event["wall"])


def run(mode: str, args: argparse.Namespace) -> dict:
    db = f"{args.pg.rsplit('/', 1)[0]}/bench_mix"
    subprocess.run(
        ["psql", args.pg, "-qc", "DROP DATABASE IF EXISTS bench_mix WITH (FORCE)", "-c", "CREATE DATABASE bench_mix"],
        check=True,
        capture_output=True,
    )
    directory = Path(tempfile.mkdtemp(prefix="mix-ledger-"))
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(DATABASE_URL=db, LEDGER_DIR=str(directory), CAIRNQ_LOG_LEVEL="INFO")
    manage(env, "migrate", "-v", "0")
    flags = ["cairnq_worker", "--queue", "mix", "--concurrency", "1", "--task", "demo.sleep", "--claim-ahead", mode]
    workers = [
        subprocess.Popen([PYTHON, "manage.py", *flags], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for _ in range(WORKERS)
    ]
    try:
        time.sleep(3)  # every worker up
        submit(env, [("demo.sleep", {"ms": 1}) for _ in range(200)])  # the warm-up: the name is short
        time.sleep(2)
        warm = {event["task_id"] for event in ledger(directory)}
        spacing = args.short // (args.long + 1)
        specs: list[tuple[str, dict[str, int]]] = []
        for i in range(args.short):
            if i and i % spacing == 0 and len([s for s in specs if s[1]["ms"] > 1]) < args.long:
                specs.append(("demo.sleep", {"ms": int(args.long_s * 1000)}))
            specs.append(("demo.sleep", {"ms": 1}))
        began = time.time()
        submit(env, specs)
        deadline = time.monotonic() + args.long_s * 3 + 60
        while time.monotonic() < deadline:
            ends = [e for e in ledger(directory) if e["event"] == "end" and e["task_id"] not in warm]
            if len(ends) >= len(specs):
                break
            time.sleep(0.5)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)
    events = [e for e in ledger(directory) if e["task_id"] not in warm]
    starts = {e["task_id"]: e for e in events if e["event"] == "start"}
    ends = {e["task_id"]: e for e in events if e["event"] == "end"}
    long_ids = {t for t in ends if t in starts and ends[t]["wall"] - starts[t]["wall"] > args.long_s / 2}
    short_ends = [ends[t]["wall"] for t in ends if t not in long_ids]
    first_long_end = min(ends[t]["wall"] for t in long_ids) if long_ids else float("inf")
    if os.environ.get("MIX_DEBUG"):
        for t in sorted(long_ids, key=lambda t: starts[t]["wall"]):
            print(f"  long {t[-6:]} pid {starts[t]['pid']} start {starts[t]['wall'] - began:.2f} end {ends[t]['wall'] - began:.2f}")
        by_pid: dict[int, list[float]] = {}
        for t, e in ends.items():
            by_pid.setdefault(e["pid"], []).append(e["wall"] - began)
        for pid, walls in by_pid.items():
            print(f"  pid {pid}: {len(walls)} tasks, first end {min(walls):.2f}, last end {max(walls):.2f}")
    return {
        "mode": mode,
        "tasks": len(specs),
        "ended": len(ends),
        "short_stuck": sum(1 for wall in short_ends if wall > first_long_end),
        "short_done_s": round(max(short_ends) - began, 2) if short_ends else None,
        "long_done_s": round(max(ends[t]["wall"] for t in long_ids) - began, 2) if long_ids else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg", default="postgresql://root@127.0.0.1:5432/postgres")
    parser.add_argument("--modes", default="auto,63", help="--claim-ahead values to run, comma-separated")
    parser.add_argument("--long", type=int, default=2, help="long tasks in the mix")
    parser.add_argument("--long-s", type=float, default=10.0, help="each long task's seconds")
    parser.add_argument("--short", type=int, default=2000, help="1 ms tasks in the mix")
    args = parser.parse_args()
    print(f"{WORKERS} workers x c1; {args.long} tasks of {args.long_s:g} s among {args.short} of 1 ms")
    print("| --claim-ahead | short stuck behind a long task | last short done | last long done |")
    print("|---|---|---|---|")
    for mode in args.modes.split(","):
        result = run(mode, args)
        print(
            f"| {mode} | {result['short_stuck']} | {result['short_done_s']} s | {result['long_done_s']} s |",
            flush=True,
        )
        if result["ended"] < result["tasks"]:
            print(f"  ! only {result['ended']} of {result['tasks']} tasks ended", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
