"""CPU time spent by role (worker processes, their database's server backends) over a span, from /proc.

Linux only. A process that starts and ends inside the span is missed, so
take the span while the fleet is up (the bench starts its workers first).
"""

from __future__ import annotations

import os
from collections import Counter

from _harness import process_cpu_seconds


def _role(pid: str, database: str) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if "cairnq_worker" in command:
        return "worker"
    # A backend's title: "postgres: <user> <database> <host> <state>".
    if command.startswith("postgres:") and f" {database} " in command:
        return "server"
    return None


def snapshot(database: str) -> dict[str, tuple[str, float]]:
    """Each worker's and server backend's CPU seconds so far: {pid: (role, seconds)}."""
    used: dict[str, tuple[str, float]] = {}
    for pid in os.listdir("/proc"):
        role = _role(pid, database) if pid.isdigit() else None
        if role is None:
            continue
        try:
            used[pid] = (role, process_cpu_seconds(pid))
        except OSError:
            continue  # ended since
    return used


def seconds_by_role(before: dict[str, tuple[str, float]], after: dict[str, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds each role used between two snapshots (a process gone by ``after`` is not counted)."""
    used: Counter[str] = Counter()
    for pid, (role, seconds) in after.items():
        used[role] += seconds - before.get(pid, (role, 0.0))[1]
    return {role: used[role] for role in ("worker", "server")}
