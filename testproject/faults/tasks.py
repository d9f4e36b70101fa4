"""Fault fixture handlers for the reliability suite (``tests/faults``).

Each misbehaves in one precise way: kill its own process, call ``os._exit``,
raise ``SystemExit``/``KeyboardInterrupt``, allocate past a memory limit,
raise monstrous exceptions, or spin without returning. They write the same
ledger as ``testproject.demo.tasks`` (one ``O_APPEND`` file per pid), so a
line written before a ``kill -9`` survives it.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import cairnq_django as cairnq
from testproject.demo.tasks import ledger

task = cairnq.task


@task("faults.poison")
def poison(ctx: Any, payload: Any) -> None:
    """SIGKILL this worker process on every attempt (recovered only by lease expiry)."""
    ledger("start", ctx)
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(5)  # never reached: the kill is synchronous for the whole process


@task("faults.os_exit")
def os_exit(ctx: Any, payload: Any) -> dict[str, int]:
    """Call ``os._exit(code)`` on attempt 1 (no cleanup, no finalize), succeed later."""
    ledger("start", ctx)
    ledger("effect", ctx)
    if ctx.attempt == 1 or payload.get("always"):
        os._exit(payload.get("code", 3))
    ledger("end", ctx)
    return {"attempt": ctx.attempt}


@task("faults.raise_base")
def raise_base(ctx: Any, payload: Any) -> None:
    """Raise ``SystemExit`` or ``KeyboardInterrupt`` from the handler thread."""
    ledger("start", ctx)
    if payload.get("kind") == "interrupt":
        raise KeyboardInterrupt("interrupted by the handler")
    raise SystemExit(payload.get("code", 4))


@task("faults.memory_hog")
def memory_hog(ctx: Any, payload: Any) -> int:
    """Allocate ``payload["mb"]`` MiB at once (a ``MemoryError`` under ``prlimit --as``)."""
    ledger("start", ctx)
    block = bytearray(payload.get("mb", 1024) << 20)
    ledger("end", ctx)
    return len(block)


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ exploded")


def _deep(n: int) -> None:
    if n == 0:
        raise RuntimeError("5000 frames down")
    _deep(n - 1)


@task("faults.monster_error")
def monster_error(ctx: Any, payload: Any) -> None:
    """Raise a 10 MB message, an exception whose ``__str__`` raises, or a deep traceback."""
    kind = payload.get("kind")
    if kind == "huge":
        raise RuntimeError("x" * 10_000_000)
    if kind == "unprintable":
        raise _Unprintable()
    _deep(payload.get("depth", 5000))


@task("faults.spin")
def spin(ctx: Any, payload: Any) -> None:
    """Never return on its own: ``sleep`` forever, or burn CPU (``payload["cpu"]``)."""
    ledger("start", ctx)
    if payload.get("cpu"):
        n = 0
        while True:
            n += 1
    while True:
        time.sleep(1)


@task("faults.cancelable")
def cancelable(ctx: Any, payload: Any) -> str:
    """Poll ``ctx.cancel_requested`` and then end as told: return, raise or die."""
    ledger("start", ctx)
    deadline = time.monotonic() + payload.get("seconds", 30)
    while time.monotonic() < deadline and not ctx.cancel_requested:
        time.sleep(0.02)
    ledger("end", ctx, cancel_seen=ctx.cancel_requested)
    then = payload.get("then", "return")
    if then == "raise":
        raise RuntimeError("failing after the cancel")
    if then == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    return "finished"


@task("faults.echo")
def echo(ctx: Any, payload: Any) -> dict[str, Any]:
    """Return the payload's size, without holding more than the payload itself."""
    ledger("start", ctx, size=len(payload.get("blob", "")))
    ledger("end", ctx)
    return {"size": len(payload.get("blob", ""))}


@task("faults.leak_then_fail")
def leak_then_fail(ctx: Any, payload: Any) -> str:
    """Attempt 1 leaks its context to a thread and raises; attempt 2 runs a while.

    The leaked thread writes (``progress``, ``heartbeat``) while attempt 2 of
    the same task runs on the same worker: both writes must be refused.
    """
    import threading

    ledger("start", ctx)
    if ctx.attempt == 1:

        def late() -> None:
            time.sleep(payload.get("after", 1.0))
            for method in ("progress", "heartbeat"):
                try:
                    if method == "progress":
                        ctx.progress(0.1, "leaked")
                    else:
                        ctx.heartbeat()
                    ledger("late_write", ctx, method=method, refused=False)
                except Exception as exc:  # noqa: BLE001
                    ledger("late_write", ctx, method=method, refused=True, error=type(exc).__name__)

        threading.Thread(target=late, daemon=True).start()
        raise RuntimeError("attempt 1 fails after leaking its context")
    ctx.progress(0.5, "attempt 2")
    time.sleep(payload.get("second_ms", 2000) / 1000)
    ledger("end", ctx)
    return "second"
