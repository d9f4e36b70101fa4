"""The ``TaskContext`` a handler receives: one per task (protocol 4.8).

A single-task handler gets one context; a batch handler gets a list of them.
Lease, cancellation and settlement are per task, so they live here.

Write gating: once the lease is known lost (a write or a heartbeat found the
row no longer ours, or the call outran ``max_run_ms``) every owned write raises
``LostLease`` locally without asking the database, because the same worker may
have re-claimed the task under the same worker id and an old handler's write
would otherwise pass the ownership check. Once settled, further owned writes
(progress, heartbeat) are refused the same way; settling twice is a no-op.

Handlers that are ``async def`` must use the ``a``-prefixed twins
(``aprogress``, ``asucceed``, ...): Django refuses database access from a
running event loop, so the twins run the same write on a worker thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from django.db import transaction

from ..protocol import bounds
from ..exceptions import LostLease
from ..protocol.payload import DEFERRED_SIZE_ATTR, byte_size, encode
from ..protocol.envelopes import as_envelope
from ..protocol.backoff import DEFAULT_RETRY_BACKOFF_MAX_MS, DEFAULT_RETRY_BACKOFF_MS, retry_delay_ms

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from ..models import Task
    from ..store.base import Store

__all__ = ["AtomicCompletion", "TaskContext"]

# Flag transitions of every context share one lock: they are rare and tiny,
# and one lock is cheaper than a lock per context when batches of 256 arrive.
_state_lock = threading.Lock()


class ContextHooks:
    """What a context tells its worker; the default does nothing (contexts built in tests)."""

    db_executor: Executor | None = None
    # Held by the worker's own SQLite writes (None elsewhere); see _load_payload.
    write_lock: threading.Lock | None = None

    def lease_lost(self, ctx: TaskContext) -> None:
        """Called once when a context first learns its lease is gone."""

    def settled(self, ctx: TaskContext, status: str) -> None:
        """Called when the handler settled a task itself (``succeed``/``fail``/``atomic``)."""


_NO_HOOKS = ContextHooks()


class AtomicCompletion:
    """Yielded by ``ctx.atomic()``: set ``result`` to store it with the completion."""

    __slots__ = ("result", "task")

    def __init__(self, result: Any) -> None:
        self.result = result
        self.task: Task | None = None


class TaskContext:
    """Per-task handle a handler uses to report progress, settle, and spawn children."""

    __slots__ = (
        "_backoff_max_ms",
        "_backoff_ms",
        "_cancel_seen",
        "_hooks",
        "_lease_ms",
        "_lost",
        "_lost_event",
        "_settled",
        "_settling",
        "_store",
        "_task",
        "_worker_id",
        "status",
    )

    def __init__(
        self,
        store: Store,
        task: Task,
        worker_id: str,
        lease_ms: int,
        *,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS,
        hooks: ContextHooks | None = None,
    ) -> None:
        self._store = store
        self._task = task
        self._worker_id = worker_id
        self._lease_ms = lease_ms
        self._backoff_ms = retry_backoff_ms
        self._backoff_max_ms = retry_backoff_max_ms
        self._hooks = hooks or _NO_HOOKS
        self._lost = False
        self._lost_event: threading.Event | None = None
        # Cancellation is monotonic: once seen it cannot be taken back.
        self._cancel_seen = task.cancel_requested_at_ms is not None
        self._settled = False
        # True while some thread is writing this task's final state; the
        # heartbeat must not read that write's effect (the row leaving
        # ``running``) as a lost lease.
        self._settling = False
        # Final status once settled (succeeded / failed / canceled / queued).
        self.status: str | None = None

    def __repr__(self) -> str:
        return f"<TaskContext {self.name} {self.task_id} attempt={self.attempt}>"

    # ---- read-only view --------------------------------------------------
    @property
    def task(self) -> Task:
        return self._task

    @property
    def task_id(self) -> str:
        return self._task.id

    @property
    def name(self) -> str:
        return self._task.name

    @property
    def queue(self) -> str:
        return self._task.queue

    @property
    def attempt(self) -> int:
        return self._task.attempt

    @property
    def max_attempts(self) -> int:
        return self._task.max_attempts

    @property
    def payload(self) -> Any:
        if self._payload_deferred:
            self._load_payload()
        return self._task.payload

    @property
    def metadata(self) -> Any:
        return self._task.metadata

    @property
    def root_id(self) -> str | None:
        return self._task.root_id

    @property
    def correlation_id(self) -> str | None:
        return self._task.correlation_id

    @property
    def parent_id(self) -> str | None:
        return self._task.parent_id

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @property
    def settled(self) -> bool:
        """True once this task reached its final state (by the handler or the worker)."""
        return self._settled

    @property
    def lost_lease(self) -> bool:
        """True once this attempt no longer owns the task; stop side effects."""
        return self._lost

    @property
    def lease_lost_event(self) -> threading.Event:
        """An event set when the lease is lost, for handlers that want to wait on it."""
        with _state_lock:
            if self._lost_event is None:
                self._lost_event = threading.Event()
                if self._lost:
                    self._lost_event.set()
            return self._lost_event

    @property
    def cancel_requested(self) -> bool:
        """True once a heartbeat or write has seen a cancel request (no query)."""
        return self._cancel_seen

    # ---- large payloads ------------------------------------------------------
    # A claim leaves a large payload in the database (sql/*/claim.sql): the
    # Task then has no payload attribute, only its size. It is fetched on first
    # use, on the handler's thread, and forgotten again when the call ends, so a
    # worker holds one such payload per running call, and only while it runs.

    def _load_payload(self) -> None:
        """Fetch the payload the claim left in the database (no-op if loaded)."""
        task = self._task
        if not self._payload_deferred:
            return
        store = self._store
        # SQLite rewrites a whole row to change one column, and a write that
        # returns columns copies the old row too: each of this worker's writes
        # to such a row (claim, heartbeat, settlement) briefly holds about three
        # copies of its payload. Reading and decoding under the worker's write
        # lock keeps those apart from this read's own two copies.
        lock = self._hooks.write_lock
        try:
            with lock if lock is not None else nullcontext():
                task.payload = store.get_payload(task.id)
        except LostLease:
            self._lose()
            raise

    @property
    def _payload_deferred(self) -> bool:
        return "payload" not in self._task.__dict__

    def _drop_payload(self) -> None:
        """Forget a payload ``_load_payload`` fetched; a later use fetches it again."""
        task = self._task
        if DEFERRED_SIZE_ATTR in task.__dict__:
            task.__dict__.pop("payload", None)

    def _payload_bytes(self) -> int:
        """Return the payload's size for the byte budget, without fetching it."""
        size: int | None = self._task.__dict__.get(DEFERRED_SIZE_ATTR)
        return byte_size(self._task.payload) if size is None else size

    # ---- worker-side bookkeeping -------------------------------------------
    def _mark_lost(self) -> bool:
        """Flag the lease lost; return True the first time (callers then report it)."""
        with _state_lock:
            if self._lost:
                return False
            self._lost = True
            event = self._lost_event
        if event is not None:
            event.set()
        return True

    def _lose(self) -> None:
        """Flag the lease lost and tell the worker (log + signal) once."""
        if self._mark_lost():
            self._hooks.lease_lost(self)

    def _observe_cancel(self, cancel_requested_at_ms: int | None) -> None:
        if cancel_requested_at_ms is not None:
            self._cancel_seen = True

    def _observe(self, row: Task) -> Task:
        self._observe_cancel(row.cancel_requested_at_ms)
        return row

    def _begin_settle(self) -> bool:
        """Reserve the right to write this task's final state; False if taken or done."""
        with _state_lock:
            if self._settled or self._settling:
                return False
            self._settling = True
            return True

    def _end_settle(self, status: str | None) -> None:
        """Record the outcome of a settlement write (None: it did not happen)."""
        with _state_lock:
            self._settling = False
            if status is not None:
                self._settled = True
                self.status = status

    @property
    def _busy(self) -> bool:
        return self._settled or self._settling

    def _require_lease(self) -> None:
        if self._lost:
            raise LostLease(self.task_id)

    def _gate(self) -> None:
        # Settled counts as "not yours any more": the statement would match no
        # row and be misread as a lost lease, so refuse locally instead.
        if self._lost or self._settled or self._settling:
            raise LostLease(self.task_id)

    def _owned(self, write: Callable[[], Task]) -> Task:
        self._gate()
        try:
            return self._observe(write())
        except LostLease:
            self._lose()
            raise

    # ---- owned writes ------------------------------------------------------
    def progress(self, value: float | None, message: str | None = None) -> Task:
        """Record progress; a None value or message keeps the stored one (protocol 3.11).

        ``value`` is a fraction from 0.0 to 1.0 (NaN and infinities are refused:
        JSON and other SDKs cannot read them back); ``message`` is text either
        database can store. A refused value raises ``ValueError`` and writes nothing.
        """
        if value is not None:
            value = bounds.check_fraction(value, "progress")
        if message is not None:
            problem = bounds.storable_problem(message)
            if problem is not None:
                raise ValueError(f"progress message {problem}")
        return self._owned(
            lambda: self._store.progress(self.task_id, self._worker_id, value, message)
        )

    def heartbeat(self) -> Task:
        """Renew this task's lease now (the worker also beats on its own)."""
        return self._owned(
            lambda: self._store.heartbeat(self.task_id, self._worker_id, self._lease_ms)
        )

    def canceled(self) -> bool:
        """Return True if a cancel was requested (remembered), else re-read the row."""
        if self._cancel_seen:
            return True
        row = self._store.get(self.task_id)
        if row is None:
            return True
        self._observe_cancel(row.cancel_requested_at_ms)
        return self._cancel_seen or row.status == "canceled"

    def succeed(self, result: Any = None) -> Task | None:
        """Settle now as succeeded (``complete``: a pending cancel wins); no-op if settled."""
        if self._settled:
            return None
        self._require_lease()
        result_json = None if result is None else encode(result, what="result")
        if not self._begin_settle():
            return None
        row = None
        try:
            row = self._owned_settle(
                lambda: self._store.complete(self.task_id, self._worker_id, result_json)
            )
        finally:
            self._end_settle(row.status if row is not None else None)
        self._hooks.settled(self, row.status)
        return row

    def fail(
        self, error: Any = "task failed", *, retryable: bool = True
    ) -> Task | None:
        """Settle now as failed; retryable failures get the worker's backoff. No-op if settled.

        ``error`` may be a reason string, an exception, a ``TaskError`` (its own
        retryability wins) or a ready envelope dict.
        """
        if self._settled:
            return None
        self._require_lease()
        envelope, retryable = as_envelope(error, retryable)
        delay = retry_delay_ms(
            self.attempt,
            base_ms=self._backoff_ms,
            max_ms=self._backoff_max_ms,
            retryable=retryable,
        )
        if not self._begin_settle():
            return None
        row = None
        try:
            row = self._owned_settle(
                lambda: self._store.fail(
                    self.task_id,
                    self._worker_id,
                    envelope,
                    retryable=retryable,
                    delay_ms=delay,
                )
            )
        finally:
            self._end_settle(row.status if row is not None else None)
        self._hooks.settled(self, row.status)
        return row

    def _owned_settle(self, write: Callable[[], Task]) -> Task:
        try:
            return self._observe(write())
        except LostLease:
            self._lose()
            raise

    @contextmanager
    def atomic(self, result: Any = None) -> Iterator[AtomicCompletion]:
        """Commit the block's ORM writes in the same transaction as this task's success.

        The completion runs last, inside the block's transaction; if the lease
        is gone by then ``LostLease`` is raised and the block's writes roll
        back with it. Set ``.result`` on the yielded object to store a result::

            with ctx.atomic() as done:
                Invoice.objects.create(...)
                done.result = {"invoice": 42}
        """
        self._gate()
        if not self._begin_settle():
            raise LostLease(self.task_id)
        handle = AtomicCompletion(result)
        status: str | None = None
        try:
            with transaction.atomic(using=self._store.alias):
                yield handle
                self._require_lease()
                result_json = (
                    None
                    if handle.result is None
                    else encode(handle.result, what="result")
                )
                row = self._owned_settle(
                    lambda: self._store.complete(
                        self.task_id, self._worker_id, result_json
                    )
                )
                handle.task = row
            status = row.status
        finally:
            self._end_settle(status)
        self._hooks.settled(self, status)

    def succeed_in(self, write: Callable[[], Any]) -> Task | None:
        """Run ``write()`` and complete this task in one transaction; its return is the result."""
        if self._settled:
            return None
        with self.atomic() as done:
            done.result = write()
        return done.task

    # ---- children and waiting ----------------------------------------------
    def submit(self, name: Any, payload: Any = None, **options: Any) -> Task:
        """Submit a child task with lineage (parent, root, correlation) wired.

        Refused with ``LostLease`` once the lease is lost: the abandoned
        attempt's retry would create the same children again.
        """
        self._require_lease()
        from ..client.submit import submit

        options.setdefault("parent_id", self.task_id)
        options.setdefault("root_id", self.root_id or self.task_id)
        options.setdefault("correlation_id", self.correlation_id)
        # A ``TaskDefinition`` may stand in for its name.
        return submit(getattr(name, "name", name), payload, **options)

    def wait(self, task_id: str, **options: Any) -> Task:
        """Wait for another task to finish (protocol 3.18)."""
        from ..client.wait import wait

        return wait(task_id, **options)

    # ---- async twins ---------------------------------------------------------
    async def _in_thread(self, fn: Callable[[], Any]) -> Any:
        executor = self._hooks.db_executor
        if executor is None:
            return await asyncio.to_thread(fn)
        return await asyncio.get_running_loop().run_in_executor(executor, fn)

    async def aprogress(self, value: float | None, message: str | None = None) -> Task:
        return await self._in_thread(lambda: self.progress(value, message))

    async def aheartbeat(self) -> Task:
        return await self._in_thread(self.heartbeat)

    async def acanceled(self) -> bool:
        if self._cancel_seen:
            return True
        return await self._in_thread(self.canceled)

    async def asucceed(self, result: Any = None) -> Task | None:
        return await self._in_thread(lambda: self.succeed(result))

    async def afail(
        self, error: Any = "task failed", *, retryable: bool = True
    ) -> Task | None:
        return await self._in_thread(lambda: self.fail(error, retryable=retryable))

    async def asucceed_in(self, write: Callable[[], Any]) -> Task | None:
        """Async twin of ``succeed_in``; ``write`` is a plain function run on a thread."""
        return await self._in_thread(lambda: self.succeed_in(write))

    async def asubmit(self, name: Any, payload: Any = None, **options: Any) -> Task:
        return await self._in_thread(lambda: self.submit(name, payload, **options))

    async def await_task(self, task_id: str, **options: Any) -> Task:
        """Async twin of ``wait``."""
        return await self._in_thread(lambda: self.wait(task_id, **options))
