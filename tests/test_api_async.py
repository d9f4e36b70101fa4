"""Pin the async twins: each one does what its sync twin does from inside an event
loop (no SynchronousOnlyOperation), and waiting — for a task or for room on a full
queue — never blocks the loop (other coroutines keep running meanwhile)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

import cairnq_django as cq
from cairnq_django.protocol.payload import encode

from tests._threads import Later


def finish(store: Any, queue: str, result: Any) -> str:
    """Claim the one task on ``queue`` and complete it with ``result``."""
    (task,) = store.claim([queue], "worker_test", lease_ms=30_000)
    store.complete(task.id, "worker_test", encode(result))
    return task.id


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    # async_to_sync from the test thread: thread-sensitive calls come back to
    # this thread, so they use the test's own database connection.
    return async_to_sync(fn)()


async def ticking(during: Awaitable[Any], every: float = 0.01) -> tuple[Any, int]:
    """Await ``during`` while counting how often a 10 ms ticker got to run."""
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            await asyncio.sleep(every)
            ticks += 1

    runner = asyncio.ensure_future(ticker())
    try:
        try:
            result: Any = await during
        except Exception as exc:
            result = exc
    finally:
        stop.set()
        await runner
    return result, ticks


def test_async_twins_roundtrip(cairnq_db: Any) -> None:
    async def scenario() -> None:
        task = await cq.asubmit("a.x", {"n": 1}, key="akey", queue="aq")
        assert task.status == "queued"
        assert (await cq.asubmit("a.x", {}, key="akey")).id == task.id
        assert (await cq.aget(task.id)).payload == {"n": 1}
        assert (await cq.aget_by_key("akey")).id == task.id
        assert await cq.aget_status(task.id) == (task.id, "queued")
        assert await cq.aget_status_by_key("akey") == (task.id, "queued")
        assert [t.id for t in await cq.alist(queue="aq")] == [task.id]
        assert (await cq.astats("aq"))["aq"]["queued"] == 1
        assert await cq.aqueue_depth("aq", 3) == 2
        assert (await cq.acancel(task.id)).status == "canceled"
        assert (await cq.aretry(task.id)).status == "queued"
        assert (await cq.acancel_by_key("akey")).status == "canceled"
        assert (await cq.aretry_by_key("akey", reset_attempt=True)).attempt == 0
        await cq.acancel(task.id)
        await asyncio.sleep(0.005)
        assert await cq.apurge(status="canceled") == [task.id]
        many = await cq.asubmit_many([("m", {"i": 1}), ("m", {"i": 2})], queue="aq")
        assert [t.payload for t in many] == [{"i": 1}, {"i": 2}]

    run(scenario)


def test_async_submit_refuses_bad_input_before_writing(cairnq_db: Any) -> None:
    async def scenario() -> None:
        with pytest.raises(ValueError, match="delay_ms"):
            await cq.asubmit("x", {}, delay_ms=-1)
        with pytest.raises(cq.SerializationError):
            await cq.asubmit("x", {"v": math.nan})
        with pytest.raises(ValueError, match="status"):
            await cq.alist(status="nope")
        assert await cq.alist() == []

    run(scenario)


def test_await_task_does_not_block_the_loop(cairnq_db: Any) -> None:
    async def scenario() -> tuple[Any, int, float]:
        task = await cq.asubmit("slow", {})
        started = time.monotonic()
        error, ticks = await ticking(cq.await_task(task.id, timeout=0.5, poll_ms=50))
        return error, ticks, time.monotonic() - started

    error, ticks, elapsed = run(scenario)
    assert isinstance(error, cq.TaskTimeout) and error.snapshot.status == "queued"
    assert 0.45 <= elapsed < 3
    # A blocking sleep would starve the ticker for the whole half second.
    assert ticks >= 10


def test_acall_returns_the_result(cairnq_db: Any, store: Any) -> None:
    worker = Later(0.2, lambda: finish(store, "acallq", {"ok": True}))

    async def scenario() -> Any:
        return await cq.acall("x", {}, queue="acallq", timeout=10, poll_ms=10)

    assert run(scenario) == {"ok": True}
    worker.join()


def test_acall_timeout_keeps_the_task(cairnq_db: Any) -> None:
    async def scenario() -> Any:
        with pytest.raises(cq.TaskTimeout) as info:
            await cq.acall("x", {}, timeout=0.1, poll_ms=20)
        return info.value.task_id

    task_id = run(scenario)
    assert cq.get(task_id).status == "queued"


def test_await_task_by_key_follows_the_key(cairnq_db: Any, store: Any) -> None:
    def produce() -> str:
        cq.submit("k", key="async-key", queue="akq")
        return finish(store, "akq", 7)

    worker = Later(0.2, produce)

    async def scenario() -> Any:
        return await cq.await_task_by_key("async-key", timeout=10, poll_ms=10)

    done = run(scenario)
    assert done.id == worker.join() and done.result == 7


def test_async_gate_waits_on_the_loop_and_raises_queue_full(cairnq_db: Any) -> None:
    async def scenario() -> tuple[Any, int]:
        await cq.asubmit("x", {}, queue="agated")
        return await ticking(cq.asubmit("x", {}, queue="agated"))

    with override_settings(CAIRNQ={"UNKNOWN_TASKS": "allow", "MAX_QUEUE_DEPTH": 1, "MAX_QUEUE_WAIT_MS": 500}):
        error, ticks = run(scenario)
    assert isinstance(error, cq.QueueFull) and error.queue == "agated"
    assert ticks >= 10
    assert cq.stats("agated")["agated"]["queued"] == 1
