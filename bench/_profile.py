"""Sample a worker with py-spy during a drain and summarise where its time went.

py-spy comes from PyPI into ``bench/.venvs/tools`` on first use. The summary
lists the functions with the most samples on top of the stack (self),
anywhere on it (total), and the innermost ``cairnq_django`` function of each
sample (what the package spent its time in, library calls included), which is usually enough to name the hot path; the raw
collapsed stacks stay in the logs folder for a flame graph.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _harness import BENCH

TOOLS = BENCH / ".venvs" / "tools"


@dataclass
class Spy:
    proc: subprocess.Popen[bytes]
    out: Path


def _ensure() -> Path:
    spy = TOOLS / "bin" / "py-spy"
    if not spy.exists():
        subprocess.run(["python3", "-m", "venv", str(TOOLS)], check=True)
        subprocess.run([str(TOOLS / "bin" / "pip"), "install", "-q", "py-spy"], check=True)
    return spy


def start(pid: int, out: Path) -> Spy:
    """Attach py-spy to ``pid`` (all threads, idle frames left out) until it exits."""
    argv = [
        str(_ensure()),
        "record",
        "--pid",
        str(pid),
        "--rate",
        "250",
        "--format",
        "raw",
        "--threads",
        "--nonblocking",
        "--output",
        str(out),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Spy(proc, out)


def finish(spy: Spy, top: int = 15) -> dict[str, Any]:
    """Wait for py-spy to write its stacks and return the top functions."""
    try:
        spy.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        spy.proc.terminate()
        spy.proc.wait()
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    deepest: Counter[str] = Counter()
    samples = 0
    if spy.out.exists():
        for line in spy.out.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = stack.split(";")
            # The first frame names the thread with --threads; keep it out of "self".
            samples += n
            if len(frames) > 1:
                own[frames[-1]] += n
            for frame in set(frames[1:]):
                total[frame] += n
            # Charge the sample to the innermost cairnq_django function on the
            # stack: the package code responsible for it, library calls included.
            mine = [f for f in frames if "cairnq_django/" in f]
            if mine:
                deepest[mine[-1]] += n

    def share(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(frame, round(100 * n / samples, 1)) for frame, n in counter.most_common(top)] if samples else []

    return {
        "file": str(spy.out),
        "samples": samples,
        "top_self_pct": share(own),
        "top_total_pct": share(total),
        "top_cairnq_django_pct": share(deepest),
    }
