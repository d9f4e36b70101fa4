"""Several real processes claiming from the same queues at once.

Pins: two claimers receiving the same task (a claim that does not lock or
skip what another transaction holds, or that leases more rows than asked),
and claimers that give up while work is left (skip-locked selections coming
back empty under contention, SQLite "database is locked" escaping).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cairnq_django.protocol import payload
from cairnq_django.store.base import Store, SubmitSpec

PROCESSES = 4
TASKS = 400

# Claims until the probe says nothing is left, completing each draw in one
# batch, and prints the ids it took. Says "ready" once set up and starts when
# the test releases every claimer at once (a line on stdin). After its first
# draw it waits until every claimer has drawn once: on a loaded machine the
# first process released could otherwise drain the queue alone, and SQLite's
# lock favours the process that just let go of it.
CLAIMER = r"""
import json, pathlib, random, sys, time
import django
django.setup()
from cairnq_django.store import get_store

worker, queues = sys.argv[1], json.loads(sys.argv[2])
barrier, claimers = pathlib.Path(sys.argv[3]), int(sys.argv[4])
store = get_store()
store.has_claimable(queues, None)  # connected before the start
print("ready", flush=True)
sys.stdin.readline()
taken = []
while True:
    if taken and not (barrier / worker).exists():
        (barrier / worker).touch()
        deadline = time.monotonic() + 60
        while len(list(barrier.iterdir())) < claimers and time.monotonic() < deadline:
            time.sleep(0.01)
    rows = store.claim(queues, worker, lease_ms=120_000, limit=random.randint(1, 7))
    if not rows:
        if not store.has_claimable(queues, None):
            break
        continue
    taken.extend(row.id for row in rows)
    if any(row.worker_id != worker or row.attempt != 1 for row in rows):
        sys.exit("claimed row not leased to this worker at attempt 1")
    done = store.complete_many(worker, [(row.id, json.dumps({"by": worker})) for row in rows])
    if set(done) != {row.id for row in rows}:
        sys.exit("lost a lease it had just taken")
print(json.dumps(taken))
"""


@pytest.mark.parametrize("queues", [["default"], ["default", "other's"]], ids=["one_queue", "two_queues"])
def test_claimers_never_share_a_task_and_take_them_all(
    store: Store, subprocess_env: dict[str, str], queues: list[str], tmp_path: Path
) -> None:
    specs = [
        SubmitSpec(
            name="job",
            payload_json=payload.encode({"i": i}),
            queue=queues[i % len(queues)],
            priority=i % 4,
        )
        for i in range(TASKS)
    ]
    submitted = {task.id for task in store.submit_many(specs)}
    barrier = tmp_path / "drawn"
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, f"worker-{n}", json.dumps(queues), str(barrier), str(PROCESSES)],
            env=subprocess_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(PROCESSES)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", proc.stderr
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs: list[Any] = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    counts = Counter(task_id for taken in outputs for task_id in taken)
    duplicates = {task_id: n for task_id, n in counts.items() if n > 1}
    assert duplicates == {}
    assert set(counts) == submitted
    # Contention really happened: every process got work.
    assert all(outputs)
    for n, taken in enumerate(outputs):
        for task_id in taken[:5]:
            row = store.get(task_id)
            assert row is not None and row.status == "succeeded" and row.attempt == 1
            assert row.worker_id == f"worker-{n}" and row.result == {"by": f"worker-{n}"}
    assert store.stats()[queues[0]]["succeeded"] == TASKS // len(queues)
