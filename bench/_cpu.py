"""CPU time spent by role (worker processes, their database's server backends) over a span, from /proc.

Linux only. A process that starts and ends inside the span is missed, so
take the span while the fleet is up (the bench starts its workers first).
"""

from __future__ import annotations

import os
from collections import Counter

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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


def snapshot(database: str) -> dict[str, tuple[str, int]]:
    """Each worker's and server backend's CPU ticks so far: {pid: (role, ticks)}."""
    ticks: dict[str, tuple[str, int]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        role = _role(pid, database)
        if role is None:
            continue
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime and stime: the 14th and 15th fields of stat, counted after the command name.
        ticks[pid] = (role, int(fields[11]) + int(fields[12]))
    return ticks


def seconds_by_role(before: dict[str, tuple[str, int]], after: dict[str, tuple[str, int]]) -> dict[str, float]:
    """CPU seconds each role used between two snapshots (a process gone by ``after`` is not counted)."""
    used: Counter[str] = Counter()
    for pid, (role, ticks) in after.items():
        used[role] += ticks - before.get(pid, (role, 0))[1] if pid in before else ticks
    return {role: used[role] / _TICKS_PER_S for role in ("worker", "server")}
