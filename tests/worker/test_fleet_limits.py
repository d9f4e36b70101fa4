"""Fleet limits held by racing worker processes (4 x --concurrency 8 on PostgreSQL, 2 on SQLite).

Every property is checked twice: from the handlers' own start/end times
(the ledger of testproject/demo/fleet_tasks.py) and by a sampler that reads
the database every 10 ms while the workers run.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections

import cairnq_django as cairnq
from cairnq_django.models import FleetStart, Task

from .conftest import intervals, max_overlap, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SAMPLE_S = 0.01


def worker_count() -> int:
    return 4 if connection.vendor == "postgresql" else 2


def start_fleet(start_worker: Callable[..., Any], **overrides: Any) -> list[Any]:
    workers = [start_worker("--concurrency", "8", overrides=overrides or None) for _ in range(worker_count())]
    for worker in workers:
        worker.wait_ready()
    return workers


def all_finished(ids: list[str]) -> bool:
    return Task.objects.filter(id__in=ids, status="succeeded").count() == len(ids)


class Sampler(threading.Thread):
    """Read the running rows of ``name`` every 10 ms; keep the most seen at once, per key."""

    def __init__(self, name: str) -> None:
        super().__init__(daemon=True)
        self.name = name
        self.most: dict[str, int] = defaultdict(int)
        # task id -> (before, after): the task left "queued" between these two instants.
        self.first_seen: dict[str, tuple[float, float]] = {}
        self.samples = 0
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            before = time.monotonic()
            while not self.stop.is_set():
                began = time.monotonic()
                with connections["default"].cursor() as cursor:
                    cursor.execute("SELECT id, status, metadata FROM cairnq_tasks WHERE name = %s", [self.name])
                    rows = cursor.fetchall()
                after = time.monotonic()
                running: dict[str, int] = defaultdict(int)
                for task_id, status, metadata in rows:
                    if status != "queued":
                        self.first_seen.setdefault(task_id, (before, after))
                    if status == "running":
                        meta = json.loads(metadata) if isinstance(metadata, str) else metadata
                        running[(meta.get("cairnq_django") or {}).get("limit_key", "")] += 1
                for key, count in running.items():
                    self.most[key] = max(self.most[key], count)
                self.samples += 1
                before = began
                time.sleep(SAMPLE_S)
        finally:
            connections["default"].close()

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(10)


def spans_of(events: list[dict[str, Any]], name: str) -> list[tuple[float, float, str]]:
    return [span for spans in intervals(events, name).values() for span in spans]


def most_in_window(times: list[float], window_s: float) -> int:
    times = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= window_s:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_global_concurrency_is_never_exceeded(cairnq_db: Any, start_worker: Any, ledger: Any) -> None:
    ids = [cairnq.submit("demo.fleet.charge", {"ms": 25}).id for _ in range(90)]
    with Sampler("demo.fleet.charge") as sampler:
        start_fleet(start_worker)
        wait_until(lambda: all_finished(ids), 120, what="every charge ran")
    spans = spans_of(ledger(), "demo.fleet.charge")
    assert len(spans) == len(ids)
    assert max_overlap(spans) <= 3
    assert sampler.samples > 50 and max(sampler.most.values()) <= 3
    # The limit binds, and the fleet fills it: three at once were seen.
    assert max_overlap(spans) == 3


def test_a_per_key_limit_is_never_exceeded(cairnq_db: Any, start_worker: Any, ledger: Any) -> None:
    ids = [cairnq.submit("demo.fleet.sync", {"customer": f"c{k}", "ms": 15}).id for k in range(50) for _ in range(3)]
    with Sampler("demo.fleet.sync") as sampler:
        start_fleet(start_worker)
        wait_until(lambda: all_finished(ids), 120, what="every sync ran")
    by_key: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    events = [e for e in ledger() if e.get("name") == "demo.fleet.sync"]
    key_of = {e["task_id"]: e["key"] for e in events}
    opened = {}
    for event in events:
        if event["event"] == "start":
            opened[event["task_id"]] = event["mono"]
        else:
            by_key[key_of[event["task_id"]]].append((opened[event["task_id"]], event["mono"], event["task_id"]))
    assert len(key_of) == len(ids)
    assert max(max_overlap(spans) for spans in by_key.values()) == 1
    assert sampler.samples > 20 and max(sampler.most.values()) == 1
    # More than one key ran at once: the limit is per key, not per name.
    everything = [span for spans in by_key.values() for span in spans]
    assert max_overlap(everything) > 1


def test_a_rate_limit_never_shows_more_starts_in_a_window(cairnq_db: Any, start_worker: Any, ledger: Any) -> None:
    ids = [cairnq.submit("demo.fleet.rated", {}).id for _ in range(35)]
    with Sampler("demo.fleet.rated") as sampler:
        start_fleet(start_worker)
        wait_until(lambda: all_finished(ids), 60, what="every rated task ran")
    # The log the claim counts from, on the database clock: exactly the rule.
    logged = [row / 1000 for row in FleetStart.objects.filter(scope="task:demo.fleet.rated").values_list("started_at_ms", flat=True)]
    assert len(logged) == len(ids)
    assert most_in_window(logged, 1.0) <= 10
    # A handler starts some dispatch time after its claim, which a loaded
    # machine stretches. Both clocks are this host's, so each task's delay is
    # known; starts closer than a second less the delays' spread were claimed
    # less than a second apart, and the rule bounds those.
    claimed = dict(
        FleetStart.objects.filter(scope="task:demo.fleet.rated").values_list("task_id", "started_at_ms")
    )
    events = [e for e in ledger() if e.get("name") == "demo.fleet.rated" and e["event"] == "start"]
    assert len(events) == len(ids)
    delays = [e["wall"] - claimed[e["task_id"]] / 1000 for e in events]
    spread = max(delays) - min(delays)
    assert spread < 0.5, f"dispatch delays from {min(delays):.3f} to {max(delays):.3f} s"
    assert most_in_window([e["wall"] for e in events], 1.0 - spread - 0.002) <= 10
    # A sample brackets each start between two reads; where the bracket is
    # tight (not stretched by a loaded machine), the window narrows by its width.
    tight = [after for before, after in sampler.first_seen.values() if after - before <= 0.05]
    assert len(tight) >= len(ids) // 2
    assert most_in_window(tight, 1.0 - 0.05) <= 10
    # Not slower than the rate allows either: 35 starts take a little over 3 windows.
    assert max(logged) - min(logged) < 4.5


def test_a_killed_worker_keeps_its_slots_until_its_leases_expire(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    ids = [cairnq.submit("demo.fleet.charge", {"ms": 20_000}).id for _ in range(3)]
    victim = start_worker("--concurrency", "8", overrides={"LEASE_MS": 2_000})
    wait_until(lambda: len([e for e in ledger() if e["event"] == "start"]) >= 3, 30, what="three charges started")
    victim.kill_group()
    killed_at = time.time()
    held = list(Task.objects.filter(id__in=ids, status="running").values_list("id", "lease_until_ms"))
    assert len(held) == 3
    expires = max(lease for _, lease in held) / 1000
    # Submitted only now, so no live worker could have run them: the
    # rescuer is the only one, and the dead worker's slots bar it at first.
    ids += [cairnq.submit("demo.fleet.charge", {"ms": 10}).id for _ in range(3)]
    rescuer = start_worker("--concurrency", "8", overrides={"LEASE_MS": 2_000})
    wait_until(lambda: all_finished(ids[3:]), 60, what="the short charges ran after the leases expired")
    later = [e["wall"] for e in ledger() if e["event"] == "start" and e["pid"] == rescuer.pid]
    assert later and min(later) >= expires - 0.05 and min(later) > killed_at
    assert rescuer.alive()


def test_a_global_resource_caps_every_worker_together(cairnq_db: Any, start_worker: Any, ledger: Any) -> None:
    ids = [cairnq.submit("demo.fleet.openai", {"ms": 20}).id for _ in range(40)]
    with Sampler("demo.fleet.openai") as sampler:
        start_fleet(start_worker)
        wait_until(lambda: all_finished(ids), 120, what="every openai call ran")
    spans = spans_of(ledger(), "demo.fleet.openai")
    assert max_overlap(spans) == 2  # GLOBAL_RESOURCES = {"openai": 2} in testproject
    assert max(sampler.most.values()) <= 2


def test_a_small_key_is_not_starved_by_a_big_one(cairnq_db: Any, start_worker: Any, ledger: Any) -> None:
    # The big key's tasks go first, so they head the queue in claim order.
    cairnq.submit_many([("demo.fleet.sync", {"customer": "big"}) for _ in range(10_000)])
    small = [cairnq.submit("demo.fleet.sync", {"customer": "small"}).id for _ in range(10)]
    worker = start_worker("--concurrency", "4")
    wait_until(lambda: all_finished(small), 120, what="the small key's tasks ran")
    worker.kill_group()
    starts = [e for e in ledger() if e["event"] == "start" and e.get("name") == "demo.fleet.sync"]
    starts.sort(key=lambda e: e["mono"])
    big = [e["mono"] for e in starts if e["key"] == "big"]
    last_small = max(e["mono"] for e in starts if e["key"] == "small")
    assert len(big) < 100 or last_small < big[99], f"the small key finished after {sum(t < last_small for t in big)} big starts"
