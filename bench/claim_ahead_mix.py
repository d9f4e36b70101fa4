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
* ``idle while held``: the strict form. A task waits claimed ahead from its
  claim to its start, or, when its worker hands it back, from the start of
  the call it waited behind to the hand-back (read from the worker's log).
  Another worker is idle between the end of one task and the start of its
  next. The figure is the longest time any worker sat idle while a task
  waited claimed ahead on another (max), and how many such overlaps exceeded
  5 ms (a worker's own claim round trip between two tasks is about 1-3 ms of
  idleness that no claiming ahead can remove). A task counts as waiting from
  its claim until the call before it on its worker ended;
* ``last short done`` and ``last long done``: when they ended, from the
  moment the mix was submitted.

``MIX_DEBUG=1`` also prints each long task's worker and times, and each
worker's count of tasks and last end.

The target (issue 34): with ``auto``, no short task stuck and the last short
task done long before the long ones; a fixed 63 shows what it prevents.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
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


# The test project's log format starts with asctime: "2026-12-07 15:20:01,123".
_HANDED_BACK = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*handed back \d+ of \d+ claimed-ahead")


def hand_backs(log: Path) -> list[float]:
    """The wall times at which a worker's log says it handed claimed-ahead tasks back."""
    times = []
    for line in log.read_text(errors="replace").splitlines():
        match = _HANDED_BACK.match(line)
        if match:
            times.append(datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return times


def idle_while_held(events: list[dict], backs: dict[int, list[float]]) -> list[float]:
    """Each overlap (s) of a worker's idle gap with a task waiting claimed ahead on another worker."""
    by_pid: dict[int, list[dict]] = {}
    for event in events:
        by_pid.setdefault(event["pid"], []).append(event)
    last = max(e["wall"] for e in events)
    # Idle gaps: from one task's end to the next start on the same worker, or
    # to the end of the mix after its last task.
    gaps: dict[int, list[tuple[float, float]]] = {}
    waits: list[tuple[int, float, float]] = []
    for pid, own in by_pid.items():
        own.sort(key=lambda e: e["wall"])
        gaps[pid] = [
            (a["wall"], b["wall"])
            for a, b in zip(own, own[1:])
            if a["event"] == "end" and b["event"] == "start" and b["wall"] > a["wall"]
        ]
        if own[-1]["event"] == "end" and own[-1]["wall"] < last:
            gaps[pid].append((own[-1]["wall"], last))
        # Held: claimed while the worker's previous call still ran, until that call ended
        # (what follows is the worker's own dispatch, not waiting behind another call).
        for a, b in zip(own, own[1:]):
            claimed = (b.get("claimed_ms") or 0) / 1000
            if a["event"] == "end" and b["event"] == "start" and claimed and claimed < a["wall"]:
                waits.append((pid, claimed, a["wall"]))
    for pid, times in backs.items():
        own_starts = [e["wall"] for e in by_pid.get(pid, []) if e["event"] == "start"]
        for handed in times:
            i = bisect.bisect_left(own_starts, handed)
            if i:
                waits.append((pid, own_starts[i - 1], handed))
    overlaps = []
    for pid, held_from, held_to in waits:
        for other, idle in gaps.items():
            if other == pid:
                continue
            i = max(0, bisect.bisect_right(idle, (held_from, float("inf"))) - 1)
            for gap_from, gap_to in idle[i:]:
                if gap_from >= held_to:
                    break
                overlap = min(gap_to, held_to) - max(gap_from, held_from)
                if overlap > 0:
                    overlaps.append(overlap)
    return overlaps


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
    logs = [directory / f"worker-{i}.log" for i in range(WORKERS)]
    workers = [
        subprocess.Popen(
            [PYTHON, "manage.py", *flags], cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT
        )
        for log in logs
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
    backs = {worker.pid: hand_backs(log) for worker, log in zip(workers, logs)}
    overlaps = idle_while_held(events, backs)
    return {
        "mode": mode,
        "idle_held_max_ms": round(max(overlaps, default=0.0) * 1000, 1),
        "idle_held_over_5ms": sum(1 for o in overlaps if o > 0.005),
        "hand_backs": sum(len(t) for t in backs.values()),
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
    print(
        "| --claim-ahead | short stuck behind a long task | idle while held: max, overlaps > 5 ms "
        "| hand-backs | last short done | last long done |"
    )
    print("|---|---|---|---|---|---|")
    for mode in args.modes.split(","):
        result = run(mode, args)
        print(
            f"| {mode} | {result['short_stuck']} | {result['idle_held_max_ms']} ms, {result['idle_held_over_5ms']} "
            f"| {result['hand_backs']} | {result['short_done_s']} s | {result['long_done_s']} s |",
            flush=True,
        )
        if result["ended"] < result["tasks"]:
            print(f"  ! only {result['ended']} of {result['tasks']} tasks ended", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
