"""Talk to the benchmark harness from inside a peer's own virtualenv.

Standard library only: this module is imported by every peer's driver and by
every peer's task handlers, each running under a different interpreter and
set of packages.

Two channels:

* a *driver* process reads one JSON command per line on stdin and answers one
  JSON object per line on stdout (``serve``);
* a *handler* reports the instant it starts as a UDP datagram to the harness
  (``started``), so timing never waits on a database write of its own.

Every timestamp is ``CLOCK_MONOTONIC`` seconds, which Linux shares between
processes, so a handler's start and a client's commit are comparable.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

PROBE_ENV = "BENCH_PROBE"  # "host:port" of the harness's UDP listener
MODE_ENV = "BENCH_PROBE_MODE"  # "first": report only the first start; "each": every start


def now() -> float:
    """Return the shared monotonic clock, in seconds."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class _Probe:
    def __init__(self) -> None:
        spec = os.environ.get(PROBE_ENV, "")
        self.addr: tuple[str, int] | None = None
        if spec:
            host, port = spec.rsplit(":", 1)
            self.addr = (host, int(port))
        self.each = os.environ.get(MODE_ENV, "first") == "each"
        self.sent_first = False
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if self.addr else None

    def hit(self, tag: Any, count: int) -> None:
        if self.sock is None:
            return
        if self.each or not self.sent_first:
            self.sent_first = True
            self.sock.sendto(f"{tag} {now()!r} {count}".encode(), self.addr)  # type: ignore[arg-type]


_probe: _Probe | None = None


def started(payload: Any = None, count: int = 1) -> None:
    """Report that a handler call started; ``payload["t"]`` tags latency trials."""
    global _probe
    if _probe is None:
        _probe = _Probe()
    tag = payload.get("t", "-") if isinstance(payload, dict) else "-"
    _probe.hit(tag, count)


def serve(commands: dict[str, Callable[..., Any]], *, loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Answer harness commands until stdin closes.

    Coroutine results run on ``loop`` (one loop for the process's lifetime, so
    pools and connections opened by one command are reused by the next).
    """
    out = sys.stdout
    # Peers' libraries may print; keep stdout for answers only.
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        op = msg.pop("op")
        try:
            result = commands[op](**msg)
            if asyncio.iscoroutine(result):
                assert loop is not None, "async command without a loop"
                result = loop.run_until_complete(result)
            answer = {"ok": True, "result": result}
        except Exception as exc:  # noqa: BLE001 - report and keep serving: one failure is one cell
            traceback.print_exc()
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


def rate(n: int, seconds: float) -> dict[str, float]:
    """Return a standard rate answer."""
    return {"n": n, "seconds": seconds, "per_s": n / seconds if seconds > 0 else 0.0}


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def task_id() -> str:
    """Return ``task_`` + a ULID (protocol 2.3): 48-bit ms clock, 80 random bits."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    digits = []
    for _ in range(26):
        digits.append(_CROCKFORD[value & 31])
        value >>= 5
    return "task_" + "".join(reversed(digits))


def sql(dialect: str, name: str) -> str:
    """Return the text of ``bench/sql/<dialect>/<name>.sql``."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "sql", dialect, f"{name}.sql"), encoding="utf-8") as fh:
        return fh.read()


def now_ms() -> int:
    """Return wall-clock epoch milliseconds (SQLite's "now" comes from the process)."""
    return int(time.time() * 1000)
