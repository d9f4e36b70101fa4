"""The async twins of the client: ``asubmit``, ``aget``, ..., ``apause_queue``, ``aworkers``, ``await_task``, ``acall``.

Each runs the sync function's work on Django's thread-sensitive thread, so
every call of one request uses the thread that owns its database connection
(and its ``atomic`` block), as Django's own async ORM methods do. Waits
(``await_task``, a full queue at the submit gate) sleep with ``asyncio.sleep``
and never block the event loop.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError

from .. import tracing
from ..conf import get_config
from ..exceptions import SchemaNotInstalled
from ..store import get_store
from ..store.missing_schema import is_missing_table
from ..tasks.unknown import judge, judged
from ..workflows.current import current_batch
from . import backpressure, pauses, queries, workers
from .submit import announce, build_spec, check_many_options, gate_limits, specs_for_many
from .unserved import timeout_hint
from .wait import DEFAULT_MAX_POLL_MS, DEFAULT_POLL_MS, DEFAULT_TIMEOUT, Poller, TaskRef, outcome, validate

if TYPE_CHECKING:
    from ..models import Task
    from ..store.base import Store, SubmitSpec

P = ParamSpec("P")
R = TypeVar("R")


def aneeds_schema(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """``schema_guard.needs_schema`` for a coroutine function."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except DatabaseError as exc:
            if is_missing_table(exc):
                raise SchemaNotInstalled(get_config()["DATABASE"]) from exc
            raise

    return call


def _async(fn: Any) -> Any:
    """Wrap a sync API function for async callers on Django's thread-sensitive thread.

    thread_sensitive=True keeps every call of one request on the thread that
    owns its database connection (and its ``atomic`` block), as Django's own
    async ORM methods do.
    """
    return sync_to_async(fn, thread_sensitive=True)


async def _apass_gate(store: Store, specs: Sequence[SubmitSpec]) -> None:
    """``submit._pass_gate``, waiting with ``asyncio.sleep``."""
    gated = gate_limits(specs)
    if not gated:
        return
    max_wait_ms = int(get_config()["MAX_QUEUE_WAIT_MS"])
    for queue, limit in gated:

        async def probe(n: int, q: str = queue) -> int:
            return await sync_to_async(store.queue_depth, thread_sensitive=True)(q, n)

        await backpressure.gate.aacquire(store.alias, queue, limit, max_wait_ms, probe)


@aneeds_schema
async def asubmit(
    name: str,
    payload: dict[str, Any] | None = None,
    **options: Any,
) -> Task:
    """Async ``submit``; a full queue is waited out with ``asyncio.sleep``."""
    spec = build_spec(name, payload, **options)
    judge(spec.name)
    store = await _async(get_store)()
    with tracing.publishing(spec.queue, spec.name) as publication:
        await _apass_gate(store, [spec])
        stamped = publication.stamp(spec)
        # Read here, in the caller's context (``async with cairnq.Batch(...)``), not in the worker thread.
        batch = current_batch.get()

        def insert() -> Task:
            row = store.submit(stamped) if batch is None else batch.insert(store, [stamped])[0]
            announce(store, [row])
            return row

        row = await _async(insert)()
        publication.published([row])
    return row


@aneeds_schema
async def asubmit_many(items: Iterable[Any], **common: Any) -> list[Task]:
    """Async ``submit_many``."""
    check_many_options(common)
    store = await _async(get_store)()
    with tracing.publishing(common.get("queue", "default")) as publication:
        specs: Iterable[SubmitSpec] = publication.stamp_all(judged(specs_for_many(items, common)))
        if backpressure.configured(get_config()):
            # As submit._gated_specs, with the gate's async wait.
            specs = list(specs)
            await _apass_gate(store, specs)

        batch = current_batch.get()  # as in asubmit

        def insert() -> list[Task]:
            rows = store.submit_many(specs) if batch is None else batch.insert(store, specs)
            announce(store, rows)
            return rows

        rows = await _async(insert)()
        publication.published(rows)
    return rows


aget = _async(queries.get)
aget_by_key = _async(queries.get_by_key)
aget_status = _async(queries.get_status)
aget_status_by_key = _async(queries.get_status_by_key)
alist_tasks = _async(queries.list_tasks)
astats = _async(queries.stats)
aqueue_depth = _async(queries.queue_depth)
acancel = _async(queries.cancel)
acancel_by_key = _async(queries.cancel_by_key)
aretry = _async(queries.retry)
aretry_by_key = _async(queries.retry_by_key)
apurge = _async(queries.purge)
apause_queue = _async(pauses.pause_queue)
aresume_queue = _async(pauses.resume_queue)
apaused_queues = _async(pauses.paused_queues)
aworkers = _async(workers.workers)


async def apoll(
    probe: Callable[[], Awaitable[TaskRef | None]],
    read: Callable[[], Awaitable[Task | None]],
    *,
    subject_id: str | None,
    key: str | None,
    timeout: float | None,
    poll_ms: int,
    max_poll_ms: int,
) -> Task:
    """Await the same condition as ``wait.poll`` without ever blocking the event loop."""
    validate(timeout, poll_ms, max_poll_ms)
    state = Poller(subject_id, key, timeout, poll_ms, max_poll_ms)
    while True:
        ref = await probe()
        remaining = state.remaining()
        row = await read() if state.wants_read(ref, remaining) else None
        if row is not None and row.is_terminal:
            return row
        if remaining <= 0:
            raise state.timeout_error(ref, row, await _async(timeout_hint)(row))
        await asyncio.sleep(state.next_sleep(remaining))


async def await_task(
    task_id: str,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    poll_ms: int = DEFAULT_POLL_MS,
    max_poll_ms: int = DEFAULT_MAX_POLL_MS,
) -> Task:
    """Async ``wait``: each probe runs off the loop, each pause is ``asyncio.sleep``."""
    return await apoll(
        lambda: aget_status(task_id),
        lambda: aget(task_id),
        subject_id=task_id,
        key=None,
        timeout=timeout,
        poll_ms=poll_ms,
        max_poll_ms=max_poll_ms,
    )


async def await_task_by_key(
    key: str,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    poll_ms: int = DEFAULT_POLL_MS,
    max_poll_ms: int = DEFAULT_MAX_POLL_MS,
) -> Task:
    """Async ``wait_by_key``."""
    return await apoll(
        lambda: aget_status_by_key(key),
        lambda: aget_by_key(key),
        subject_id=None,
        key=key,
        timeout=timeout,
        poll_ms=poll_ms,
        max_poll_ms=max_poll_ms,
    )


async def acall(
    name: str,
    payload: dict[str, Any] | None = None,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    poll_ms: int = DEFAULT_POLL_MS,
    max_poll_ms: int = DEFAULT_MAX_POLL_MS,
    **options: Any,
) -> Any:
    """Async ``call``."""
    validate(timeout, poll_ms, max_poll_ms)
    task = await asubmit(name, payload, **options)
    final = await await_task(task.id, timeout=timeout, poll_ms=poll_ms, max_poll_ms=max_poll_ms)
    return outcome(final)
