"""The public Python API: submit, read, wait for, cancel, retry and purge tasks.

Every function runs on the Django connection of ``CAIRNQ["DATABASE"]`` through
the store (``cairnq_django.store``), so a call inside ``transaction.atomic()``
on that alias is part of the caller's transaction. Each synchronous function has
an ``a``-prefixed async twin for async views; the async wait is
``await_task`` / ``await_task_by_key`` (``await`` is a keyword).

This module must stay importable before the app registry is ready (the package
``__init__`` imports it), so models and the store are imported inside functions.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError

from . import wait as _wait, backpressure
from ..protocol import bounds, validation
from .. import signals
from .wait import TaskRef
from ..conf import get_config
from ..exceptions import PayloadTooLarge, SchemaNotInstalled, SerializationError, TaskCanceled, TaskFailed
from ..store.missing_schema import is_missing_table
from ..protocol.envelopes import unreadable_error_envelope
from ..protocol.payload import Undecodable, encode_object
from ..tasks.unknown import judge, judged

if TYPE_CHECKING:
    from ..models import Task
    from ..store.base import Store, SubmitSpec

SUBMIT_OPTIONS = validation.SUBMIT_OPTIONS


def _store() -> Store:
    from ..store import get_store

    return get_store()


P = ParamSpec("P")
R = TypeVar("R")


def _needs_schema(fn: Callable[P, R]) -> Callable[P, R]:
    """Raise ``SchemaNotInstalled`` (one line: what to run) where ``fn`` meets missing tables."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        # A bare try: nothing is paid on the path that succeeds.
        try:
            return fn(*args, **kwargs)
        except DatabaseError as exc:
            if is_missing_table(exc):
                raise SchemaNotInstalled(get_config()["DATABASE"]) from exc
            raise

    return call


def _aneeds_schema(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """``_needs_schema`` for a coroutine function."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except DatabaseError as exc:
            if is_missing_table(exc):
                raise SchemaNotInstalled(get_config()["DATABASE"]) from exc
            raise

    return call


# ---------------------------------------------------------------- validation
_require_text = bounds.check_text
_require_texts = validation.check_optional_texts


def _check_payload_size(payload_json: str, limit: int | None) -> None:
    """Raise ``PayloadTooLarge`` past ``limit`` (``MAX_PAYLOAD_BYTES``; None: no limit)."""
    # A UTF-8 character takes 1-4 bytes: most payloads are decided by length alone.
    if limit is None or len(payload_json) * 4 <= limit:
        return
    size = len(payload_json.encode("utf-8"))
    if size > limit:
        raise PayloadTooLarge(size, limit)


def build_spec(
    name: Any,
    payload: Any = None,
    *,
    key: Any = None,
    conflict: Any = "reuse",
    queue: Any = "default",
    priority: Any = 0,
    max_attempts: Any = 3,
    delay_ms: Any = 0,
    metadata: Any = None,
    correlation_id: Any = None,
    parent_id: Any = None,
    root_id: Any = None,
) -> SubmitSpec:
    """Validate one submit's arguments and encode its JSON; raise before any write.

    The order is the protocol's (3.1): conflict, max_attempts, delay_ms, then
    the remaining argument types, then the payload and metadata encoding.
    """
    from ..store.base import SubmitSpec

    validation.check_submit_args(
        name, queue, key, conflict, priority, max_attempts, delay_ms, correlation_id, parent_id, root_id
    )
    payload_json = encode_object(payload, what="payload")
    _check_payload_size(payload_json, get_config()["MAX_PAYLOAD_BYTES"])
    metadata_json = encode_object(metadata, what="metadata")
    return SubmitSpec(
        name=name,
        payload_json=payload_json,
        queue=queue,
        key=key,
        conflict=conflict,
        priority=priority,
        max_attempts=max_attempts,
        delay_ms=delay_ms,
        metadata_json=metadata_json,
        parent_id=parent_id,
        root_id=root_id,
        correlation_id=correlation_id,
    )


# ---------------------------------------------------------------- the gate
def _gate_limits(alias: str, specs: Iterable[SubmitSpec]) -> builtins.list[tuple[str, int]]:
    config = get_config()
    gated = []
    for spec in specs:
        limit = backpressure.limit_for(config, spec.queue)
        if limit is not None:
            gated.append((spec.queue, limit))
    return gated


def _pass_gate(store: Store, specs: Sequence[SubmitSpec]) -> None:
    gated = _gate_limits(store.alias, specs)
    if not gated:
        return
    max_wait_ms = int(get_config()["MAX_QUEUE_WAIT_MS"])
    for queue, limit in gated:

        def probe(n: int, q: str = queue) -> int:
            return store.queue_depth(q, n)

        backpressure.gate.acquire(store.alias, queue, limit, max_wait_ms, probe)


async def _apass_gate(store: Store, specs: Sequence[SubmitSpec]) -> None:
    gated = _gate_limits(store.alias, specs)
    if not gated:
        return
    max_wait_ms = int(get_config()["MAX_QUEUE_WAIT_MS"])
    for queue, limit in gated:

        async def probe(n: int, q: str = queue) -> int:
            return await sync_to_async(store.queue_depth, thread_sensitive=True)(q, n)

        await backpressure.gate.aacquire(store.alias, queue, limit, max_wait_ms, probe)


# ---------------------------------------------------------------- signals
def _announce(store: Store, rows: Sequence[Task]) -> None:
    """Send ``task_enqueued`` for the rows this call inserted (``signals.send_after_commit``).

    The store marks each returned row ``cairnq_inserted`` (False for an
    existing row a keyed ``reuse`` found): only new rows are announced.
    """
    from ..models import Task as TaskModel

    if not signals.task_enqueued.receivers:
        return  # nothing listens: skip walking a bulk submit's rows
    fresh = [row for row in rows if getattr(row, "cairnq_inserted", True)]
    if not fresh:
        return

    def send() -> None:
        for row in fresh:
            signals.task_enqueued.send(sender=TaskModel, task=row)

    signals.send_after_commit(store.alias, send)


# ---------------------------------------------------------------- submit
@_needs_schema
def submit(
    name: str,
    payload: dict[str, Any] | None = None,
    *,
    key: str | None = None,
    conflict: str = "reuse",
    queue: str = "default",
    priority: int = 0,
    max_attempts: int = 3,
    delay_ms: int = 0,
    metadata: dict[str, Any] | None = None,
    correlation_id: str | None = None,
    parent_id: str | None = None,
    root_id: str | None = None,
) -> Task:
    """Enqueue one task and return its row (or the existing row a keyed ``reuse`` found).

    Raises ``ValueError`` for a bad argument, ``SerializationError`` for a
    payload or metadata JSON cannot carry, ``AlreadyExists`` for a keyed
    ``reject`` that found a task, and ``QueueFull`` when the submit gate
    waited ``MAX_QUEUE_WAIT_MS`` without headroom. Nothing is written in any of
    these cases.
    """
    spec = build_spec(
        name,
        payload,
        key=key,
        conflict=conflict,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        delay_ms=delay_ms,
        metadata=metadata,
        correlation_id=correlation_id,
        parent_id=parent_id,
        root_id=root_id,
    )
    judge(spec.name)
    store = _store()
    _pass_gate(store, [spec])
    row = store.submit(spec)
    _announce(store, [row])
    return row


def _check_many_options(common: Mapping[str, Any]) -> None:
    unknown = set(common) - set(SUBMIT_OPTIONS)
    if unknown:
        raise TypeError(f"submit_many() got unexpected options: {', '.join(sorted(unknown))}")
    # Checked here as well as per item: a bad shared option is refused even
    # when there are no items, or when every item overrides it.
    for option, value in common.items():
        validation.check_submit_option(option, value)


def _specs_for_many(items: Iterable[Any], common: Mapping[str, Any]) -> Iterator[SubmitSpec]:
    """Validate and encode each item as it is read: a generator.

    Lazy so a store that streams its writes (PostgreSQL's COPY) checks the
    next items while the server inserts the ones before; the store writes
    the batch in one transaction, so an item that raises still leaves
    nothing written.
    """
    size_limit = get_config()["MAX_PAYLOAD_BYTES"]
    shared: SubmitSpec | None = None
    for index, item in enumerate(items):
        # Pairs first: the Mapping test is an ABC check, slow next to these.
        if isinstance(item, (tuple, builtins.list)) and len(item) == 2:
            name, payload = item
            # A pair takes every option from ``common``: validate those once
            # (the first pair builds the template), then only the pair itself.
            if shared is None:
                shared = build_spec(name, payload, **common)
                yield shared
            else:
                yield _like(shared, name, payload, size_limit)
            continue
        if not isinstance(item, Mapping):
            raise ValueError(f"items[{index}] must be a dict or a (name, payload) pair, got {item!r}")
        fields = dict(item)
        if "name" not in fields:
            raise ValueError(f"items[{index}] has no 'name'")
        bad = set(fields) - set(SUBMIT_OPTIONS) - {"name", "payload"}
        if bad:
            raise ValueError(f"items[{index}] has unknown fields: {', '.join(sorted(bad))}")
        name = fields.pop("name")
        payload = fields.pop("payload", None)
        yield build_spec(name, payload, **{**common, **fields})


def _like(shared: SubmitSpec, name: Any, payload: Any, size_limit: int | None) -> SubmitSpec:
    """``shared`` with another name and payload, checked as ``build_spec`` checks them."""
    _require_text(name, "name")
    payload_json = encode_object(payload, what="payload")
    _check_payload_size(payload_json, size_limit)
    # A copy of the shared spec's fields with the two that differ: running the
    # (frozen) dataclass constructor, or dataclasses.replace, per item cost
    # more than the checks above.
    fields = shared.__dict__.copy()
    fields["name"] = name
    fields["payload_json"] = payload_json
    spec = _new_object(type(shared))
    _set_attribute(spec, "__dict__", fields)
    return spec


_new_object = object.__new__
_set_attribute = object.__setattr__


def _gated_specs(store: Store, specs: Iterable[SubmitSpec]) -> Iterable[SubmitSpec]:
    """``specs``, after the submit gate let them through when a depth limit is set.

    The gate needs every item's queue before the first write, so a gated call
    reads (and checks) all of its items first.
    """
    if not backpressure.configured(get_config()):
        return specs
    listed = builtins.list(specs)
    _pass_gate(store, listed)
    return listed


@_needs_schema
def submit_many(items: Iterable[Any], **common: Any) -> builtins.list[Task]:
    """Enqueue many tasks in one transaction; return their rows in input order.

    Each item is a dict of ``submit`` arguments (``name`` required) or a
    ``(name, payload)`` pair; keyword arguments are shared defaults that an
    item's own fields override. Every item is validated and encoded as it is
    written, inside the batch's transaction, so one bad item raises and
    inserts nothing.
    """
    _check_many_options(common)
    store = _store()
    rows = store.submit_many(_gated_specs(store, judged(_specs_for_many(items, common))))
    _announce(store, rows)
    return rows


# ---------------------------------------------------------------- reads
@_needs_schema
def get(task_id: str) -> Task | None:
    """Return the task with this id, or None."""
    _require_text(task_id, "task_id")
    return _store().get(task_id)


@_needs_schema
def get_by_key(key: str) -> Task | None:
    """Return the task the key currently points at, or None."""
    _require_text(key, "key")
    return _store().get_by_key(key)


def _ref(answer: tuple[str, str] | None) -> TaskRef | None:
    return None if answer is None else TaskRef(*answer)


@_needs_schema
def get_status(task_id: str) -> TaskRef | None:
    """Return ``(id, status)`` without the payload: the cheap polling read."""
    _require_text(task_id, "task_id")
    return _ref(_store().get_status(task_id))


@_needs_schema
def get_status_by_key(key: str) -> TaskRef | None:
    """Return ``(id, status)`` of the task the key points at now, or None."""
    _require_text(key, "key")
    return _ref(_store().get_status_by_key(key))


@_needs_schema
def list_tasks(
    *,
    status: str | None = None,
    queue: str | None = None,
    name: str | None = None,
    root_id: str | None = None,
    correlation_id: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> builtins.list[Task]:
    """Return tasks newest first, filtered by whichever arguments are given.

    Exported as ``cairnq_django.list``.
    """
    validation.check_list_args(status, limit, offset)
    _require_texts(queue=queue, name=name, root_id=root_id, correlation_id=correlation_id)
    return _store().list(
        status=status,
        queue=queue,
        name=name,
        root_id=root_id,
        correlation_id=correlation_id,
        limit=limit,
        offset=offset,
    )


@_needs_schema
def stats(queue: str | None = None) -> dict[str, dict[str, int]]:
    """Return ``{queue: {status: count}}`` with all five statuses present."""
    _require_texts(queue=queue)
    return _store().stats(queue)


@_needs_schema
def queue_depth(queue: str, max_depth: int) -> int:
    """Return how many more tasks fit on ``queue`` under ``max_depth`` (0 when full)."""
    _require_text(queue, "queue")
    validation.check_max_depth(max_depth)
    return _store().queue_depth(queue, max_depth)


# ---------------------------------------------------------------- writes
@_needs_schema
def cancel(task_id: str) -> Task | None:
    """Cancel a live task: a queued one ends now, a running one is asked to stop.

    Returns the updated row, or None when the task is terminal or missing.
    """
    _require_text(task_id, "task_id")
    return _store().cancel(task_id)


@_needs_schema
def cancel_by_key(key: str) -> Task | None:
    """Cancel the task the key points at (see ``cancel``)."""
    _require_text(key, "key")
    return _store().cancel_by_key(key)


@_needs_schema
def retry(task_id: str, *, reset_attempt: bool = False) -> Task | None:
    """Re-queue a failed or canceled task under the same id; None otherwise."""
    _require_text(task_id, "task_id")
    return _store().retry(task_id, reset_attempt=reset_attempt)


@_needs_schema
def retry_by_key(key: str, *, reset_attempt: bool = False) -> Task | None:
    """Re-queue the failed or canceled task the key points at (see ``retry``)."""
    _require_text(key, "key")
    return _store().retry_by_key(key, reset_attempt=reset_attempt)


@_needs_schema
def purge(
    *,
    older_than_ms: int = 0,
    queue: str | None = None,
    status: str | None = None,
    name: str | None = None,
    limit: int = 1000,
) -> builtins.list[str]:
    """Delete up to ``limit`` terminal tasks finished over ``older_than_ms`` ago; return their ids."""
    validation.check_purge_args(older_than_ms, limit, status)
    _require_texts(queue=queue, name=name)
    return _store().purge(
        older_than_ms=older_than_ms, queue=queue, status=status, name=name, limit=limit
    )


# ---------------------------------------------------------------- wait / call
@_needs_schema
def wait(
    task_id: str,
    *,
    timeout: float | None = _wait.DEFAULT_TIMEOUT,
    poll_ms: int = _wait.DEFAULT_POLL_MS,
    max_poll_ms: int = _wait.DEFAULT_MAX_POLL_MS,
) -> Task:
    """Block until the task is terminal and return it (any terminal status).

    ``timeout`` is in seconds (None waits forever). On the deadline raises
    ``TaskTimeout`` (with ``task_id`` and a ``snapshot`` of the row); the task
    itself is not touched and keeps running.
    """
    _require_text(task_id, "task_id")
    store = _store()
    return _wait.poll(
        lambda: _ref(store.get_status(task_id)),
        lambda: store.get(task_id),
        subject_id=task_id,
        key=None,
        timeout=timeout,
        poll_ms=poll_ms,
        max_poll_ms=max_poll_ms,
    )


@_needs_schema
def wait_by_key(
    key: str,
    *,
    timeout: float | None = _wait.DEFAULT_TIMEOUT,
    poll_ms: int = _wait.DEFAULT_POLL_MS,
    max_poll_ms: int = _wait.DEFAULT_MAX_POLL_MS,
) -> Task:
    """Wait for whatever task the key points at; re-resolved on every poll.

    A key that names nothing yet is simply not finished, and a ``replace``
    during the wait moves the wait onto the new task.
    """
    _require_text(key, "key")
    store = _store()
    return _wait.poll(
        lambda: _ref(store.get_status_by_key(key)),
        lambda: store.get_by_key(key),
        subject_id=None,
        key=key,
        timeout=timeout,
        poll_ms=poll_ms,
        max_poll_ms=max_poll_ms,
    )


def outcome(task: Task) -> Any:
    """Return a terminal task's result, or raise ``TaskFailed`` / ``TaskCanceled``.

    A stored result Python cannot decode (another writer's row) raises
    ``SerializationError``; an undecodable error envelope is reported as a
    ``TaskFailed`` with code ``bad_payload``. Either way the raw text stays
    readable on ``task.result`` / ``task.error`` (a ``payload.Undecodable``).
    """
    if task.status == "succeeded":
        if isinstance(task.result, Undecodable):
            raise SerializationError(
                f"task {task.id} succeeded but its stored result cannot be decoded: {task.result.reason}"
            )
        return task.result
    if task.status == "failed":
        error = task.error
        if isinstance(error, Undecodable):
            error = unreadable_error_envelope(error.reason)
        raise TaskFailed(task.id, error)
    raise TaskCanceled(task.id)


def call(
    name: str,
    payload: dict[str, Any] | None = None,
    *,
    timeout: float | None = _wait.DEFAULT_TIMEOUT,
    poll_ms: int = _wait.DEFAULT_POLL_MS,
    max_poll_ms: int = _wait.DEFAULT_MAX_POLL_MS,
    **options: Any,
) -> Any:
    """Submit a task, wait for it and return its result.

    Raises ``TaskFailed`` (envelope members as attributes), ``TaskCanceled``
    or ``TaskTimeout``; after a timeout the task keeps running and
    ``wait(exc.task_id)`` picks the wait up again. Do not call this inside
    ``transaction.atomic()``: no worker can see the task before the commit.
    """
    _wait.validate(timeout, poll_ms, max_poll_ms)
    task = submit(name, payload, **options)
    final = wait(task.id, timeout=timeout, poll_ms=poll_ms, max_poll_ms=max_poll_ms)
    return outcome(final)


# ---------------------------------------------------------------- async twins
def _async(fn: Any) -> Any:
    """Wrap a sync API function for async callers on Django's thread-sensitive thread.

    thread_sensitive=True keeps every call of one request on the thread that
    owns its database connection (and its ``atomic`` block), as Django's own
    async ORM methods do.
    """
    return sync_to_async(fn, thread_sensitive=True)


@_aneeds_schema
async def asubmit(
    name: str,
    payload: dict[str, Any] | None = None,
    **options: Any,
) -> Task:
    """Async ``submit``; a full queue is waited out with ``asyncio.sleep``."""
    spec = build_spec(name, payload, **options)
    judge(spec.name)
    store = await _async(_store)()
    await _apass_gate(store, [spec])

    def insert() -> Task:
        row = store.submit(spec)
        _announce(store, [row])
        return row

    return await _async(insert)()


@_aneeds_schema
async def asubmit_many(items: Iterable[Any], **common: Any) -> builtins.list[Task]:
    """Async ``submit_many``."""
    _check_many_options(common)
    specs: Iterable[SubmitSpec] = judged(_specs_for_many(items, common))
    store = await _async(_store)()
    if backpressure.configured(get_config()):
        # As _gated_specs, with the gate's async wait.
        specs = builtins.list(specs)
        await _apass_gate(store, specs)

    def insert() -> builtins.list[Task]:
        rows = store.submit_many(specs)
        _announce(store, rows)
        return rows

    return await _async(insert)()


aget = _async(get)
aget_by_key = _async(get_by_key)
aget_status = _async(get_status)
aget_status_by_key = _async(get_status_by_key)
alist_tasks = _async(list_tasks)
astats = _async(stats)
aqueue_depth = _async(queue_depth)
acancel = _async(cancel)
acancel_by_key = _async(cancel_by_key)
aretry = _async(retry)
aretry_by_key = _async(retry_by_key)
apurge = _async(purge)


async def await_task(
    task_id: str,
    *,
    timeout: float | None = _wait.DEFAULT_TIMEOUT,
    poll_ms: int = _wait.DEFAULT_POLL_MS,
    max_poll_ms: int = _wait.DEFAULT_MAX_POLL_MS,
) -> Task:
    """Async ``wait``: each probe runs off the loop, each pause is ``asyncio.sleep``."""
    return await _wait.apoll(
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
    timeout: float | None = _wait.DEFAULT_TIMEOUT,
    poll_ms: int = _wait.DEFAULT_POLL_MS,
    max_poll_ms: int = _wait.DEFAULT_MAX_POLL_MS,
) -> Task:
    """Async ``wait_by_key``."""
    return await _wait.apoll(
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
    timeout: float | None = _wait.DEFAULT_TIMEOUT,
    poll_ms: int = _wait.DEFAULT_POLL_MS,
    max_poll_ms: int = _wait.DEFAULT_MAX_POLL_MS,
    **options: Any,
) -> Any:
    """Async ``call``."""
    _wait.validate(timeout, poll_ms, max_poll_ms)
    task = await asubmit(name, payload, **options)
    final = await await_task(task.id, timeout=timeout, poll_ms=poll_ms, max_poll_ms=max_poll_ms)
    return outcome(final)


__all__ = [
    "TaskRef",
    "acall",
    "acancel",
    "acancel_by_key",
    "aget",
    "aget_by_key",
    "aget_status",
    "aget_status_by_key",
    "alist_tasks",
    "apurge",
    "aqueue_depth",
    "aretry",
    "aretry_by_key",
    "astats",
    "asubmit",
    "asubmit_many",
    "await_task",
    "await_task_by_key",
    "build_spec",
    "call",
    "cancel",
    "cancel_by_key",
    "get",
    "get_by_key",
    "get_status",
    "get_status_by_key",
    "list_tasks",
    "outcome",
    "purge",
    "queue_depth",
    "retry",
    "retry_by_key",
    "stats",
    "submit",
    "submit_many",
]
