"""Fixture handlers for worker tests and the demo pipeline.

Handlers that tests observe append JSON lines to a ledger: one file per
process in ``$LEDGER_DIR`` (``<pid>.jsonl``), opened ``O_APPEND`` and written
with one ``write()`` per event, so a line survives ``kill -9`` of its writer.
Events: ``start``, ``end``, ``effect``, ``violation`` (a ceiling exceeded
inside this process) and ``batch``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from types import MappingProxyType
from typing import Any

import cairnq_django as cairnq
from cairnq_django.exceptions import TaskError

task = cairnq.task

# ---- the ledger -------------------------------------------------------------------------

_ledger_lock = threading.Lock()
_ledger_fd: int | None = None
_ledger_pid: int | None = None


def ledger(event: str, ctx: Any = None, **extra: Any) -> None:
    """Append one event line to this process's ledger file (no-op without LEDGER_DIR)."""
    global _ledger_fd, _ledger_pid
    directory = os.environ.get("LEDGER_DIR")
    if not directory:
        return
    record: dict[str, Any] = {
        "event": event,
        "pid": os.getpid(),
        "thread": threading.current_thread().name,
        "mono": time.monotonic(),
        "wall": time.time(),
    }
    if ctx is not None:
        record.update(
            task_id=ctx.task_id,
            name=ctx.name,
            attempt=ctx.attempt,
            worker_id=ctx.worker_id,
        )
    record.update(extra)
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    with _ledger_lock:
        if _ledger_fd is None or _ledger_pid != os.getpid():
            _ledger_fd = os.open(
                os.path.join(directory, f"{os.getpid()}.jsonl"),
                os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                0o644,
            )
            _ledger_pid = os.getpid()
        os.write(_ledger_fd, line)


# In-process ceiling counters: a handler that finds more of its kind running
# than allowed logs a ``violation`` (the interval sweep in tests is the other check).
_running_lock = threading.Lock()
_running: dict[str, int] = {}


class _Slot:
    def __init__(self, key: str, ceiling: int | None, ctx: Any) -> None:
        self.key, self.ceiling, self.ctx = key, ceiling, ctx

    def __enter__(self) -> _Slot:  # noqa: PYI034 - a private helper, never subclassed
        with _running_lock:
            _running[self.key] = _running.get(self.key, 0) + 1
            now = _running[self.key]
        if self.ceiling is not None and now > self.ceiling:
            ledger(
                "violation", self.ctx, key=self.key, running=now, ceiling=self.ceiling
            )
        return self

    def __exit__(self, *exc: object) -> None:
        with _running_lock:
            _running[self.key] -= 1


def _gpu_capacity() -> int | None:
    from cairnq_django.conf import get_config

    value = os.environ.get("DEMO_GPU_CAPACITY")
    if value:
        return int(value)
    return (get_config().get("RESOURCES") or {}).get("gpu")


def _sleep_ms(payload: Any) -> None:
    ms = (payload or {}).get("ms", 0)
    if ms:
        time.sleep(ms / 1000)


# ---- basic handlers ---------------------------------------------------------------------


@task("demo.noop")
def noop(ctx: Any, payload: Any) -> Any:
    """Return ``payload["result"]`` (or nothing): the drain benchmark's handler."""
    return payload.get("result") if isinstance(payload, dict) else None


@task("demo.noop_batch", batch=256)
def noop_batch(items: list[Any]) -> None:
    """Do nothing for a whole batch: leftovers succeed with no result."""
    return


@task("demo.sleep")
def sleep(ctx: Any, payload: Any) -> dict[str, Any]:
    """Sleep ``payload["ms"]`` and record start/end in the ledger (the start with its claim's time)."""
    ledger("start", ctx, claimed_ms=ctx.task.updated_at_ms)
    _sleep_ms(payload)
    ledger("end", ctx)
    return {"slept_ms": payload.get("ms", 0)}


@task("demo.limited", concurrency=2)
def limited(ctx: Any, payload: Any) -> None:
    """At most two calls at once per worker process."""
    with _Slot("name:demo.limited", 2, ctx):
        ledger("start", ctx)
        _sleep_ms(payload)
        ledger("end", ctx)


@task("demo.gpu", resource="gpu")
def gpu(ctx: Any, payload: Any) -> None:
    """Holds one unit of the ``gpu`` resource while it sleeps."""
    with _Slot("resource:gpu", _gpu_capacity(), ctx):
        ledger("start", ctx, resource="gpu")
        _sleep_ms(payload)
        ledger("end", ctx, resource="gpu")


@task("demo.gpu_render", resource="gpu", concurrency=2)
def gpu_render(ctx: Any, payload: Any) -> None:
    """Shares the ``gpu`` resource with ``demo.gpu``; its own ceiling is 2."""
    with (
        _Slot("resource:gpu", _gpu_capacity(), ctx),
        _Slot("name:demo.gpu_render", 2, ctx),
    ):
        ledger("start", ctx, resource="gpu")
        _sleep_ms(payload)
        ledger("end", ctx, resource="gpu")


@task("demo.flaky")
def flaky(ctx: Any, payload: Any) -> dict[str, int]:
    """Raise on the first ``payload["fail_times"]`` attempts, then succeed."""
    ledger("start", ctx)
    if ctx.attempt <= payload.get("fail_times", 1):
        raise RuntimeError(f"flaky failure on attempt {ctx.attempt}")
    ledger("end", ctx)
    return {"attempt": ctx.attempt}


@task("demo.crash")
def crash(ctx: Any, payload: Any) -> None:
    """Always raise an ordinary exception (a retryable ``handler_error``)."""
    ledger("start", ctx)
    raise RuntimeError(payload.get("message", "boom"))


@task("demo.task_error")
def task_error(ctx: Any, payload: Any) -> None:
    """Raise a non-retryable ``TaskError`` with its own code."""
    raise TaskError(
        "input rejected", type="InputError", code="bad_input", details={"field": "x"}
    )


@task("demo.system_exit")
def system_exit(ctx: Any, payload: Any) -> None:
    """Raise ``SystemExit`` (or ``KeyboardInterrupt``) from a handler thread."""
    if payload.get("interrupt"):
        raise KeyboardInterrupt
    raise SystemExit(3)


@task("demo.bad_result")
def bad_result(ctx: Any, payload: Any) -> Any:
    """Return a value JSON cannot carry (fails permanently, ``unserializable_result``)."""
    return {1, 2, 3}


@task("demo.hang")
def hang(ctx: Any, payload: Any) -> str:
    """Wait until a cancel is seen on the heartbeat or the lease is lost, then return."""
    ledger("start", ctx)
    deadline = time.monotonic() + payload.get("seconds", 60)
    while time.monotonic() < deadline:
        if ctx.cancel_requested or ctx.lost_lease:
            ledger("end", ctx, cancel_seen=ctx.cancel_requested, lost=ctx.lost_lease)
            return "stopped"
        time.sleep(0.02)
    ledger("end", ctx, cancel_seen=False)
    return "timeout"


@task("demo.stubborn")
def stubborn(ctx: Any, payload: Any) -> str:
    """Sleep through everything (for ``--max-run-ms``), then try to write anyway."""
    ledger("start", ctx)
    time.sleep(payload.get("seconds", 5))
    try:
        ctx.progress(0.5, "late")
        ledger("late_write", ctx, refused=False)
    except Exception as exc:  # noqa: BLE001
        ledger("late_write", ctx, refused=True, error=type(exc).__name__)
    return "done"


@task("demo.leaker")
def leaker(ctx: Any, payload: Any) -> str:
    """Leak the context to a thread that keeps writing after the handler returned."""

    def late() -> None:
        time.sleep(payload.get("after", 0.3))
        for method in ("progress", "heartbeat"):
            try:
                if method == "progress":
                    ctx.progress(0.1, "leaked")
                else:
                    ctx.heartbeat()
                ledger("late_write", ctx, method=method, refused=False)
            except Exception as exc:  # noqa: BLE001
                ledger(
                    "late_write",
                    ctx,
                    method=method,
                    refused=True,
                    error=type(exc).__name__,
                )

    threading.Thread(target=late, daemon=True).start()
    return "returned"


@task("demo.progress")
def progress(ctx: Any, payload: Any) -> None:
    """Report progress twice (a message, then a fraction alone) and finish."""
    ctx.progress(0.25, "started")
    ctx.progress(0.5)


@task("demo.kill_once")
def kill_once(ctx: Any, payload: Any) -> dict[str, int]:
    """Record a side effect, then SIGKILL the worker on attempt 1 (crash before finalize)."""
    ledger("start", ctx)
    ledger("effect", ctx)
    if ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    ledger("end", ctx)
    return {"attempt": ctx.attempt}


@task("demo.atomic_group")
def atomic_group(ctx: Any, payload: Any) -> None:
    """Create an auth Group in the same transaction as this task's completion.

    Waits for ``$LEDGER_DIR/go-<task_id>`` first (if ``payload["gate"]``), so a
    test can steal the lease before the transaction starts.
    """
    from django.contrib.auth.models import Group

    ledger("start", ctx)
    if payload.get("gate"):
        gate = os.path.join(os.environ["LEDGER_DIR"], f"go-{ctx.task_id}")
        deadline = time.monotonic() + 30
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.02)
    try:
        with ctx.atomic() as done:
            Group.objects.create(name=payload["group"])
            done.result = {"group": payload["group"]}
    except Exception as exc:
        ledger("end", ctx, error=type(exc).__name__)
        raise
    ledger("end", ctx)


@task("demo.batch", batch=8)
def batch(items: list[Any]) -> dict[str, Any]:
    """Double ``n`` for each task; ``fail`` items fail permanently, ``early`` ones succeed early."""
    ledger("batch", None, size=len(items), ids=[item.task_id for item in items])
    results = {}
    for item in items:
        if item.payload.get("fail"):
            item.fail("rejected by the batch handler", retryable=False)
        elif item.payload.get("early"):
            item.succeed({"early": True})
        else:
            results[item.task_id] = {"double": item.payload["n"] * 2}
    return results


@task("demo.echo_batch", batch=4)
def echo_batch(items: list[Any]) -> dict[str, Any]:
    """Return each task's ``payload["value"]`` as its result (mapping form)."""
    results = {}
    for item in items:
        value = item.payload.get("value")
        if item.payload.get("nul"):
            value = {"s": "a\u0000b"}
        results[item.task_id] = value
    return results


@task("demo.mapping_batch", batch=4)
def mapping_batch(items: list[Any]) -> Any:
    """Return results as a read-only ``Mapping`` that is not a ``dict``: they still fill by task id."""
    return MappingProxyType({item.task_id: {"n": item.payload["n"]} for item in items if "n" in item.payload})


@task("demo.batch_raise", batch=4)
def batch_raise(items: list[Any]) -> None:
    """Raise for the whole batch: each task fails retryably with its own backoff."""
    raise RuntimeError("batch exploded")


@task("demo.async_echo")
async def async_echo(ctx: Any, payload: Any) -> Any:
    """An async handler: report progress through the async twin, return the payload."""
    await ctx.aprogress(0.5, "halfway")
    await asyncio.sleep(payload.get("ms", 0) / 1000)
    return {"echo": payload}


@task("demo.async_parent")
async def async_parent(ctx: Any, payload: Any) -> str:
    """An async handler that submits a ``demo.noop`` child through ``ctx.asubmit``; returns its id."""
    child = await ctx.asubmit("demo.noop", {"result": "child"})
    return child.id


@task("demo.async_sleep")
async def async_sleep(ctx: Any, payload: Any) -> None:
    """An async handler that sleeps ``payload["ms"]`` and records start/end in the ledger."""
    ledger("start", ctx)
    await asyncio.sleep(payload.get("ms", 0) / 1000)
    ledger("end", ctx)


@task("demo.async_hang")
async def async_hang(ctx: Any, payload: Any) -> None:
    """An async handler that never finishes on its own (cancelled at max_run_ms)."""
    ledger("start", ctx)
    await asyncio.sleep(payload.get("seconds", 60))


# ---- snooze: back to the queue for later, the attempt not counted -----------------------

# Runs of each task in this process: a snooze keeps the attempt number, so the
# handlers count their own runs to decide when to stop snoozing.
_runs_lock = threading.Lock()
_runs: dict[str, int] = {}


def _run_number(ctx: Any) -> int:
    with _runs_lock:
        _runs[ctx.task_id] = _runs.get(ctx.task_id, 0) + 1
        return _runs[ctx.task_id]


def _wait_for_gate(ctx: Any) -> None:
    """Wait for ``$LEDGER_DIR/go-<task_id>`` (up to 30 s), so a test can act on the running task."""
    gate = os.path.join(os.environ["LEDGER_DIR"], f"go-{ctx.task_id}")
    deadline = time.monotonic() + 30
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)


@task("demo.snooze")
def snooze(ctx: Any, payload: Any) -> dict[str, int]:
    """Snooze the first ``times`` runs by ``delay_ms``, then return the run and attempt.

    ``gate``: wait for the test's go file first. ``cancel_self``: request this
    task's own cancel before snoozing (inline tests: cancel wins).
    """
    run = _run_number(ctx)
    ledger("start", ctx, run=run)
    if payload.get("gate"):
        _wait_for_gate(ctx)
    if payload.get("cancel_self"):
        cairnq.cancel(ctx.task_id)
    if run <= payload.get("times", 1):
        ledger("end", ctx, run=run, snoozed=True)
        raise cairnq.Snooze(delay_ms=payload.get("delay_ms", 0))
    ledger("end", ctx, run=run)
    return {"attempt": ctx.attempt, "runs": run}


@task("demo.async_snooze")
async def async_snooze(ctx: Any, payload: Any) -> dict[str, int]:
    """``demo.snooze`` as an async handler (no gate)."""
    run = _run_number(ctx)
    ledger("start", ctx, run=run)
    await asyncio.sleep(0)
    if run <= payload.get("times", 1):
        raise cairnq.Snooze(delay_ms=payload.get("delay_ms", 0))
    return {"attempt": ctx.attempt, "runs": run}


@task("demo.snooze_batch", batch=4)
def snooze_batch(items: list[Any]) -> dict[str, Any]:
    """On an item's first run, ``snooze_ms`` snoozes it alone (a ``Snooze`` as its value)
    and ``raise_ms`` snoozes the whole call (raised); otherwise each returns its run and attempt."""
    runs = {item.task_id: _run_number(item) for item in items}
    ledger("batch", None, size=len(items), ids=[item.task_id for item in items])
    for item in items:
        if runs[item.task_id] == 1 and "raise_ms" in item.payload:
            raise cairnq.Snooze(delay_ms=item.payload["raise_ms"])
    return {
        item.task_id: (
            cairnq.Snooze(delay_ms=item.payload["snooze_ms"])
            if runs[item.task_id] == 1 and "snooze_ms" in item.payload
            else {"attempt": item.attempt, "runs": runs[item.task_id]}
        )
        for item in items
    }


# ---- a small pipeline: ingest a document, embed its chunks on the GPU, summarize --------


@task("demo.pipeline.ingest", queue="default")
def ingest(ctx: Any, payload: Any) -> dict[str, Any]:
    """Split a document into chunks and submit one embedding task per chunk."""
    text = payload.get("text", "")
    size = payload.get("chunk", 40)
    chunks = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    ids = [
        ctx.submit(
            "demo.pipeline.embed", {"doc": payload.get("doc"), "chunk": chunk}
        ).id
        for chunk in chunks
    ]
    ctx.submit("demo.pipeline.summarize", {"doc": payload.get("doc"), "chunks": ids})
    return {"chunks": len(chunks)}


@task("demo.pipeline.embed", batch=16, resource="gpu")
def embed(items: list[Any]) -> dict[str, Any]:
    """Embed a batch of chunks (a stand-in vector: letter counts)."""
    return {
        item.task_id: {"vector": [item.payload["chunk"].count(c) for c in "aeiou"]}
        for item in items
    }


@task("demo.pipeline.summarize")
def summarize(ctx: Any, payload: Any) -> dict[str, Any]:
    """Wait for the chunk embeddings and sum them."""
    total = [0] * 5
    for task_id in payload.get("chunks", []):
        row = ctx.wait(task_id)
        for i, value in enumerate((row.result or {}).get("vector", [0] * 5)):
            total[i] += value
    return {"doc": payload.get("doc"), "vowels": total}


# The fleet-limited handlers live in their own module; importing it registers them.
from . import fleet_tasks  # noqa: E402,F401


# ---- workflows (tests/workflows) ----------------------------------------------------------


@task("demo.wf.step")
def wf_step(ctx: Any, payload: Any) -> dict[str, Any]:
    """A workflow node: record its start with what its parents returned, then return its own name.

    ``payload["fail"]`` makes it fail for good (a ``TaskError``).
    """
    parents = ctx.parent_results()
    ledger("start", ctx, parents=sorted(parents))
    if isinstance(payload, dict) and payload.get("fail"):
        raise TaskError("step failed on purpose", type="StepFailed")
    return {"node": (payload or {}).get("node"), "parents": parents}
