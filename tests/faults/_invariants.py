"""The invariant checker I1-I7 as one pure function over (ledger, final rows).

It reads no database and starts no process: a case gathers the ledger events
(``start``/``effect``/``end``/``violation`` lines written by the fixture
handlers), the final task rows and what it injected (the pids it killed or
paused), and gets back a :class:`Verdict` listing every broken invariant.
I5 (liveness) and I6 (clear errors) are about processes and exceptions, so the
cases assert them directly; the checker covers I1, I2, I3, I4's row half and I7.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

TERMINAL = ("succeeded", "failed", "canceled")


@dataclass
class Row:
    """The columns of a final ``cairnq_tasks`` row the invariants read."""

    id: str
    status: str
    attempt: int
    worker_id: str | None
    lease_until_ms: int | None


@dataclass
class Verdict:
    """What the checker found; ``problems`` is empty when every invariant holds."""

    tasks: int = 0
    lost: int = 0
    starts: int = 0
    duplicates: int = 0
    duplicate_effects: int = 0
    unexplained_duplicates: int = 0
    violations: int = 0
    problems: list[str] = field(default_factory=list)

    def fail(self, text: str) -> None:
        if len(self.problems) < 40:
            self.problems.append(text)

    def assert_ok(self) -> None:
        assert not self.problems, "invariants broken:\n" + "\n".join(self.problems)


def rows_from(records: Iterable[Mapping[str, Any]]) -> list[Row]:
    """Build :class:`Row` values from mappings (a ``values()`` queryset or dict rows)."""
    return [
        Row(r["id"], r["status"], r["attempt"], r.get("worker_id"), r.get("lease_until_ms"))
        for r in records
    ]


def _sweep(spans: list[tuple[float, float]]) -> int:
    points = [(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans]
    points.sort()
    most = now = 0
    for _, delta in points:
        now += delta
        most = max(most, now)
    return most


def check(
    events: list[dict[str, Any]],
    rows: list[Row],
    *,
    expected: Mapping[str, str] | str = "succeeded",
    lost_pids: Iterable[int] = (),
    lease_loss_ok: bool = False,
    reruns: Iterable[str] = (),
    ceilings: Mapping[str, int] | None = None,
    resources: Mapping[str, tuple[int, Iterable[str]]] | None = None,
) -> Verdict:
    """Check I1, I2, I3 and I7 over one run.

    ``expected`` is the terminal status every row must reach (or one per id).
    ``lost_pids`` are the pids the case killed or paused: an attempt that
    started on one of them may be re-run (I2). ``lease_loss_ok`` admits
    re-runs explained by a lease lost without a kill (a database outage, a
    timeout), which the case injected itself; ``reruns`` are ids the case
    expects to run again by design (a handler that raises, then is retried).
    ``ceilings`` maps a task name to
    its per-process concurrency; ``resources`` maps a resource to
    (capacity, names sharing it) -- both are checked per pid by a sweep over
    the handlers' start/end intervals plus the in-handler ``violation`` events.
    """
    verdict = Verdict(tasks=len(rows))
    lost = set(lost_pids)
    reruns = set(reruns)
    by_id = {row.id: row for row in rows}

    # I1: every task reached its expected terminal status.
    for row in rows:
        want = expected if isinstance(expected, str) else expected[row.id]
        if row.status != want:
            verdict.lost += 1
            verdict.fail(f"I1 {row.id}: status {row.status!r}, expected {want!r}")

    # I7: the lease exists exactly while running.
    for row in rows:
        if row.status == "running" and row.lease_until_ms is None:
            verdict.fail(f"I7 {row.id}: running without a lease")
        if row.status in TERMINAL and row.lease_until_ms is not None:
            verdict.fail(f"I7 {row.id}: terminal ({row.status}) with a lease")

    # I2: every start beyond the first is explained by a lost earlier attempt.
    starts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    effects: dict[str, int] = defaultdict(int)
    for event in events:
        task_id = event.get("task_id")
        if task_id not in by_id:
            continue
        if event["event"] == "start":
            starts[task_id].append(event)
        elif event["event"] == "effect":
            effects[task_id] += 1
    for task_id, seen in starts.items():
        verdict.starts += len(seen)
        seen.sort(key=lambda e: (e["attempt"], e["wall"]))
        attempts = [e["attempt"] for e in seen]
        # A hand-back (graceful shutdown) does not count the attempt, nor does
        # a claim a PostgreSQL crash undid (ASYNC_CLAIM_COMMIT), so the same
        # number may start again: only after a signalled process or an
        # injected database crash.
        for before, after in pairwise(seen):
            if (
                before["attempt"] == after["attempt"]
                and before["pid"] not in lost
                and task_id not in reruns
                and not lease_loss_ok
            ):
                verdict.fail(f"I2 {task_id}: attempt {before['attempt']} started twice")
        row = by_id[task_id]
        if max(attempts) > row.attempt:
            verdict.fail(f"I2 {task_id}: started attempt {max(attempts)} > row attempt {row.attempt}")
        # Two overlapping executions never both record an outcome: a
        # succeeded row holds the last attempt that started.
        if row.status == "succeeded" and row.attempt != max(attempts):
            verdict.fail(f"I2 {task_id}: row holds attempt {row.attempt}, last start {max(attempts)}")
        extra = len(seen) - 1
        if extra <= 0:
            continue
        verdict.duplicates += extra
        if effects[task_id] > 1:
            verdict.duplicate_effects += effects[task_id] - 1
        for earlier in seen[:-1]:
            if earlier["pid"] in lost or lease_loss_ok or task_id in reruns:
                continue
            verdict.unexplained_duplicates += 1
            verdict.fail(
                f"I2 {task_id}: attempt {earlier['attempt']} on pid {earlier['pid']} was"
                " re-run though its process was neither killed nor paused"
            )

    # I3: ceilings per pid, by interval sweep and by the in-handler counter.
    verdict.violations = sum(1 for e in events if e["event"] == "violation")
    if verdict.violations:
        verdict.fail(f"I3: {verdict.violations} in-handler violation events")
    spans: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    opened: dict[tuple[int, str, int], dict[str, Any]] = {}
    for event in sorted(events, key=lambda e: e["mono"]):
        key = (event["pid"], event.get("task_id", ""), event.get("attempt", 0))
        if event["event"] == "start":
            opened[key] = event
        elif event["event"] == "end" and key in opened:
            begun = opened.pop(key)
            spans[(event["pid"], event["name"])].append((begun["mono"], event["mono"]))
    for (pid, name), intervals in spans.items():
        cap = (ceilings or {}).get(name)
        if cap is not None and _sweep(intervals) > cap:
            verdict.fail(f"I3 pid {pid}: {_sweep(intervals)} {name} at once > {cap}")
    for resource, (capacity, names) in (resources or {}).items():
        members = set(names)
        per_pid: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for (pid, name), intervals in spans.items():
            if name in members:
                per_pid[pid].extend(intervals)
        for pid, intervals in per_pid.items():
            if _sweep(intervals) > capacity:
                verdict.fail(f"I3 pid {pid}: {_sweep(intervals)} {resource} units > {capacity}")
    return verdict


def fleet_peak(events: list[dict[str, Any]], names: Iterable[str]) -> int:
    """Return the most handlers of ``names`` running at once across every pid (wall clock)."""
    members = set(names)
    opened: dict[tuple[int, str, int], float] = {}
    spans = []
    for event in sorted(events, key=lambda e: e["wall"]):
        if event.get("name") not in members:
            continue
        key = (event["pid"], event["task_id"], event["attempt"])
        if event["event"] == "start":
            opened[key] = event["wall"]
        elif event["event"] == "end" and key in opened:
            spans.append((opened.pop(key), event["wall"]))
    return _sweep(spans)
