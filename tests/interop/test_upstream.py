"""Pin wire compatibility with the real upstream SDK (``cairnq==0.15.1``) on one
shared test database, in both directions: rows, results, keys, the key lock,
cancel-wins, snoozed rows and (PostgreSQL) NOTIFY written by one side must be
what the other side reads and obeys.

The upstream SDK is asyncio-only. It runs on an event loop in a daemon thread,
and every call into it carries a hard timeout, so a hung upstream call fails the
test instead of wedging pytest (after a failed SQLite connect it can hang).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from django.db import connections, transaction

import cairnq_django as cq
from cairnq_django.client.wait import outcome
from cairnq_django.protocol.payload import encode
from cairnq_django.store import get_store
from cairnq_django.store.base import ClaimRequest
from cairnq_django.tasks.registry import unregister
from cairnq_django.testing import run_until_idle
from cairnq_django.worker.budgets import fleet_limits
from tests._spans import Spans, recorded_spans  # noqa: F401 - the fixture

cairnq = pytest.importorskip("cairnq")

CALL_TIMEOUT_S = 20.0
QUEUE = "interop"
DJANGO_WORKER = "worker_django_interop"
UPSTREAM_WORKER = "worker_upstream_interop"


def test_upstream_is_the_pinned_release() -> None:
    assert cairnq.__version__ == "0.15.1"


class UpstreamLoop:
    """An asyncio loop on a daemon thread; ``call`` bounds every coroutine it runs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="upstream-loop", daemon=True)
        self.thread.start()

    def call(self, make: Callable[[], Awaitable[Any]], timeout: float = CALL_TIMEOUT_S) -> Any:
        """Run ``make()`` on the loop and return its result, or fail after ``timeout``."""

        async def bounded() -> Any:
            return await asyncio.wait_for(make(), timeout)

        return asyncio.run_coroutine_threadsafe(bounded(), self.loop).result(timeout + 5)

    def start(self, coro: Coroutine[Any, Any, Any]) -> Future[Any]:
        """Start a long-running coroutine (a worker); the caller bounds its ``result``."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


def upstream_source() -> tuple[str, str]:
    """Return (dialect, path or DSN) naming the test database Django uses now."""
    conf = connections["default"].settings_dict
    if connections["default"].vendor == "sqlite":
        return "sqlite", str(conf["NAME"])
    user = conf.get("USER") or "root"
    host = conf.get("HOST") or "127.0.0.1"
    port = conf.get("PORT") or 5432
    return "postgres", f"postgresql://{user}@{host}:{port}/{conf['NAME']}"


@pytest.fixture
def upstream(cairnq_db: Any) -> Iterator[tuple[UpstreamLoop, Any]]:
    """Yield the loop and a connected upstream ``CairnQ`` client on the test database."""
    dialect, source = upstream_source()
    loop = UpstreamLoop()

    async def connect() -> Any:
        if dialect == "sqlite":
            client = cairnq.CairnQ.sqlite(source)
        else:
            client = cairnq.CairnQ.postgres(source, min_size=1, max_size=3)
        await client.connect()
        return client

    client = loop.call(connect)
    try:
        yield loop, client
    finally:
        try:
            loop.call(client.close)
        finally:
            loop.close()


def run_worker(loop: UpstreamLoop, client: Any, handlers: dict[str, Any], **options: Any) -> tuple[Any, Future[Any]]:
    """Start an upstream ``Worker`` on the shared store with ``handlers``; return it and its run."""

    async def build() -> Any:
        worker = cairnq.Worker(client.store, [QUEUE], **{"poll_interval_ms": 50, **options})
        for name, fn in handlers.items():
            worker.task(name)(fn)
        return worker

    worker = loop.call(build)
    return worker, loop.start(worker.run())


def stop_worker(loop: UpstreamLoop, worker: Any, running: Future[Any]) -> None:
    loop.loop.call_soon_threadsafe(worker.stop)
    running.result(CALL_TIMEOUT_S)


# ---------------------------------------------------------------- scenarios
def test_upstream_submit_django_claims_and_completes(upstream: tuple[UpstreamLoop, Any]) -> None:
    loop, client = upstream
    payload = {"text": "naïve — 日本", "nested": {"list": [1, None, 2.5]}, "empty": {}}
    submitted = loop.call(lambda: client.submit("interop.echo", payload, queue=QUEUE, priority=2))

    seen = cq.get(submitted.id)
    assert seen is not None and seen.status == "queued" and seen.payload == payload
    assert seen.root_id == submitted.id and seen.priority == 2

    (claimed,) = get_store().claim([QUEUE], DJANGO_WORKER, lease_ms=30_000)
    assert claimed.id == submitted.id and claimed.attempt == 1
    result = {"echo": payload, "ok": True}
    get_store().complete(claimed.id, DJANGO_WORKER, encode(result))

    final = loop.call(lambda: client.get(submitted.id))
    assert final.status == "succeeded"
    assert final.result == result
    assert final.progress == 1.0 and final.worker_id == DJANGO_WORKER
    assert final.lease_until_ms is None and final.completed_at_ms is not None
    # The upstream wait sees the same terminal row.
    assert loop.call(lambda: client.wait(submitted.id, timeout_ms=2_000)).status == "succeeded"


def test_django_submit_upstream_worker_runs_it(upstream: tuple[UpstreamLoop, Any]) -> None:
    loop, client = upstream

    async def double(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
        await ctx.progress(0.5, "halfway")
        return {"doubled": payload["n"] * 2}

    async def explode(ctx: Any, payload: dict[str, Any]) -> None:
        raise LookupError("no such thing")

    worker, running = run_worker(loop, client, {"interop.double": double, "interop.explode": explode})
    try:
        task = cq.submit("interop.double", {"n": 21}, queue=QUEUE, metadata={"from": "django"})
        done = cq.wait(task.id, timeout=15, poll_ms=20)
        assert done.status == "succeeded" and done.result == {"doubled": 42}
        assert done.worker_id == worker.worker_id and done.attempt == 1
        assert done.message == "halfway"

        # call() surfaces the upstream worker's failure envelope.
        with pytest.raises(cq.TaskFailed) as info:
            cq.call("interop.explode", {}, queue=QUEUE, max_attempts=1, timeout=15, poll_ms=20)
        assert (info.value.type, info.value.code) == ("LookupError", "handler_error")
        assert "no such thing" in info.value.message and info.value.retryable is True
        assert cq.call("interop.double", {"n": 5}, queue=QUEUE, timeout=15, poll_ms=20) == {"doubled": 10}
    finally:
        stop_worker(loop, worker, running)


def test_keys_are_shared_both_ways(upstream: tuple[UpstreamLoop, Any]) -> None:
    loop, client = upstream
    theirs = loop.call(lambda: client.submit("interop.k", {"side": "upstream"}, key="K-up", queue=QUEUE))
    assert cq.submit("interop.k", {"side": "django"}, key="K-up", queue=QUEUE).id == theirs.id
    with pytest.raises(cq.AlreadyExists):
        cq.submit("interop.k", key="K-up", conflict="reject")

    ours = cq.submit("interop.k", {"side": "django"}, key="K-dj", queue=QUEUE)
    again = loop.call(lambda: client.submit("interop.k", {"side": "upstream"}, key="K-dj", queue=QUEUE))
    assert again.id == ours.id and again.payload == {"side": "django"}
    with pytest.raises(cairnq.AlreadyExists):
        loop.call(lambda: client.submit("interop.k", key="K-dj", conflict="reject"))

    # An upstream replace cancels our task and repoints the key; we follow it.
    replaced = loop.call(lambda: client.submit("interop.k", {"v": 2}, key="K-dj", conflict="replace", queue=QUEUE))
    assert replaced.id != ours.id
    assert cq.get(ours.id).status == "canceled"
    assert cq.get_by_key("K-dj").id == replaced.id
    assert cq.get_status_by_key("K-dj") == (replaced.id, "queued")
    # Our cancel_by_key acts on what upstream wrote, and upstream reads it back.
    assert cq.cancel_by_key("K-up").id == theirs.id
    assert loop.call(lambda: client.get(theirs.id)).status == "canceled"
    # Metacharacters in a key mean the same row on both sides.
    odd = "k'; DELETE FROM cairnq_task_keys; -- %s"
    mine = cq.submit("interop.k", key=odd, queue=QUEUE)
    assert loop.call(lambda: client.get_by_key(odd)).id == mine.id


def test_key_lock_excludes_upstream_until_our_commit(upstream: tuple[UpstreamLoop, Any]) -> None:
    loop, client = upstream
    with transaction.atomic():
        ours = cq.submit("interop.lock", {"side": "django"}, key="K-lock", queue=QUEUE)
        # Upstream's keyed submit must wait for our transaction (PG: the shared
        # advisory lock; SQLite: our write lock), then reuse our task.
        pending = loop.start(asyncio.wait_for(client.submit("interop.lock", {"side": "upstream"}, key="K-lock", queue=QUEUE), CALL_TIMEOUT_S))
        time.sleep(0.5)
        assert not pending.done(), "upstream's keyed submit did not wait for our key lock"
    theirs = pending.result(CALL_TIMEOUT_S)
    assert theirs.id == ours.id
    assert theirs.payload == {"side": "django"}


def test_our_cancel_of_an_upstream_claimed_task_wins(upstream: tuple[UpstreamLoop, Any]) -> None:
    loop, client = upstream
    task = cq.submit("interop.cancel", {}, queue=QUEUE)
    (claimed,) = loop.call(lambda: client.store.claim(queues=[QUEUE], worker_id=UPSTREAM_WORKER, lease_ms=30_000))
    assert claimed.id == task.id and claimed.status == "running"

    requested = cq.cancel(task.id)
    assert requested.status == "running" and requested.cancel_requested_at_ms is not None
    assert requested.cancel_requested

    final = loop.call(lambda: client.store.complete(task_id=task.id, worker_id=UPSTREAM_WORKER, result={"x": 1}))
    assert final.status == "canceled"
    ours = cq.get(task.id)
    assert ours.status == "canceled" and ours.result is None and ours.completed_at_ms is not None
    assert ours.lease_until_ms is None
    with pytest.raises(cq.TaskCanceled):
        outcome(cq.wait(task.id, timeout=2))


def test_upstream_retry_and_purge_of_our_rows(upstream: tuple[UpstreamLoop, Any]) -> None:
    loop, client = upstream
    task = cq.submit("interop.purge", {}, queue=QUEUE, key="K-purge")
    cq.cancel(task.id)
    again = loop.call(lambda: client.retry(task.id))
    assert again.status == "queued" and cq.get(task.id).status == "queued"
    cq.cancel_by_key("K-purge")
    time.sleep(0.01)
    assert loop.call(lambda: client.purge(queue=QUEUE)) == [task.id]
    # The database cascade freed the key: a new submit gets a new task.
    assert cq.get_by_key("K-purge") is None
    assert cq.submit("interop.purge", key="K-purge", queue=QUEUE).id != task.id


def test_our_submit_wakes_an_idle_upstream_worker(upstream: tuple[UpstreamLoop, Any]) -> None:
    if connections["default"].vendor != "postgresql":
        pytest.skip("NOTIFY exists on PostgreSQL only; SQLite workers poll")
    loop, client = upstream

    async def echo(ctx: Any, payload: dict[str, Any]) -> str:
        return "awake"

    async def listener_up() -> None:
        # Upstream starts its LISTEN connection at connect() in the background,
        # and a worker that goes idle before it is up sleeps one plain poll
        # interval. Wait for it (a private attribute: there is no public probe)
        # so the test measures our NOTIFY, not upstream's start-up race.
        while getattr(client.store, "_listener", None) is None:
            client.store._listener_ready()
            await asyncio.sleep(0.02)

    loop.call(listener_up, timeout=10)
    # A 60 s poll interval: only the cairnq_queued notification our insert
    # fires can wake this worker within the wait below.
    worker, running = run_worker(loop, client, {"interop.wake": echo}, poll_interval_ms=60_000)
    try:
        time.sleep(1.0)  # let it finish its first, empty poll and go to sleep
        started = time.monotonic()
        task = cq.submit("interop.wake", {}, queue=QUEUE)
        done = cq.wait(task.id, timeout=5, poll_ms=20)
        assert done.result == "awake"
        assert time.monotonic() - started < 5
    finally:
        stop_worker(loop, worker, running)


def test_upstream_reads_and_claims_our_snoozed_rows(upstream: tuple[UpstreamLoop, Any]) -> None:
    # A snooze leaves a plain queued row: upstream reads it as such and claims it
    # when due, as the same attempt number (the snoozed run did not count).
    loop, client = upstream
    later = cq.submit("interop.snooze", {"n": 1}, queue=QUEUE, priority=2, max_attempts=1)
    now = cq.submit("interop.snooze", {"n": 2}, queue=QUEUE, priority=1, max_attempts=1)
    store = get_store()
    assert len(store.claim([QUEUE], DJANGO_WORKER, lease_ms=30_000, limit=2)) == 2
    store.progress(later.id, DJANGO_WORKER, 0.5, "half way")
    before = store.now_ms()
    assert store.snooze_many(DJANGO_WORKER, [(later.id, 60_000), (now.id, 0)]) == {later.id: "queued", now.id: "queued"}

    seen = loop.call(lambda: client.get(later.id))
    assert (seen.status, seen.attempt, seen.max_attempts, seen.worker_id, seen.lease_until_ms) == ("queued", 0, 1, None, None)
    assert (seen.progress, seen.message, seen.error, seen.completed_at_ms) == (None, None, None, None)
    assert seen.run_at_ms >= before + 60_000 and seen.payload == {"n": 1}

    claimed = loop.call(lambda: client.store.claim(queues=[QUEUE], worker_id=UPSTREAM_WORKER, lease_ms=30_000, limit=5))
    assert [(row.id, row.attempt) for row in claimed] == [(now.id, 1)]
    final = loop.call(lambda: client.store.complete(task_id=now.id, worker_id=UPSTREAM_WORKER, result={"ok": True}))
    assert final.status == "succeeded" and cq.get(now.id).result == {"ok": True}


def test_upstream_submitted_limited_tasks_are_claimed_under_the_empty_key(upstream: tuple[UpstreamLoop, Any]) -> None:
    # An upstream client stores no limit key, so its tasks of a keyed name share
    # the key "": a per-key limit of 1 admits one of them at a time, whatever
    # their payloads say, and our own submits keep their keys beside them.
    loop, client = upstream
    definition = cq.task("interop.keyed", global_concurrency=1, limit_key="customer")(lambda ctx, payload: None)
    try:
        foreign = [
            loop.call(lambda c=customer: client.submit("interop.keyed", {"customer": c}, queue=QUEUE)).id
            for customer in ("a", "b", "c")
        ]
        ours = cq.submit("interop.keyed", {"customer": "a"}, queue=QUEUE).id
        fleet = fleet_limits(definition, {})
        assert fleet is not None and fleet.keyed
        store = get_store()

        def draw(worker: str) -> list[Any]:
            request = ClaimRequest([QUEUE], worker, 30_000, [fleet.name])
            return store.claim_session(request, lambda take: take([fleet.name], 8, fleet)) or []

        first = draw(DJANGO_WORKER)
        assert sorted(row.id for row in first) == sorted([foreign[0], ours])
        assert draw("worker_django_second") == []
        store.complete(foreign[0], DJANGO_WORKER, None)
        # One of the other two: upstream ids made in one millisecond are in no set order.
        [next_one] = draw("worker_django_second")
        assert next_one.id in foreign[1:]
    finally:
        unregister("interop.keyed")


def test_upstream_rows_without_a_trace_context_run_under_a_root_span(
    upstream: tuple[UpstreamLoop, Any], recorded_spans: Spans
) -> None:
    loop, client = upstream
    theirs = loop.call(lambda: client.submit("demo.noop", {"result": "theirs"}, queue=QUEUE, metadata={"by": "upstream"}))
    run_until_idle([QUEUE], names=["demo.noop"])
    assert (cq.get(theirs.id).status, cq.get(theirs.id).result) == ("succeeded", "theirs")
    (consumer,) = recorded_spans.consumers()
    assert consumer.parent is None and not consumer.links
    assert consumer.attributes["messaging.message.id"] == theirs.id
    assert cq.get(theirs.id).metadata == {"by": "upstream"}


def test_upstream_workers_run_our_traced_rows_and_keep_their_metadata(
    upstream: tuple[UpstreamLoop, Any], recorded_spans: Spans
) -> None:
    loop, client = upstream
    seen: list[Any] = []

    async def record(ctx: Any, payload: dict[str, Any]) -> str:
        seen.append(ctx.metadata)
        return "ran upstream"

    worker, running = run_worker(loop, client, {"interop.traced": record})
    try:
        task = cq.submit("interop.traced", {}, queue=QUEUE, metadata={"from": "django"})
        done = cq.wait(task.id, timeout=15, poll_ms=20)
    finally:
        stop_worker(loop, worker, running)
    assert (done.status, done.result) == ("succeeded", "ran upstream")
    (producer,) = recorded_spans.producers()
    context = producer.get_span_context()
    (metadata,) = seen
    assert metadata["from"] == "django"
    assert metadata["cairnq_django"]["trace"]["traceparent"].startswith(f"00-{context.trace_id:032x}-")
    assert loop.call(lambda: client.get(task.id)).metadata == metadata == done.metadata
