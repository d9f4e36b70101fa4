"""The ``TaskContext`` a handler receives: one per task (protocol 4.8).

A single-task handler gets one context; a batch handler gets a list of them.
A context is the handler's view of the worker's ``Attempt``
(``worker/attempt.py``), which holds the lease, cancel and settlement state
and the write gate: once the lease is known lost every owned write raises
``LostLease`` without asking the database; once settled, further owned
writes (progress, heartbeat) are refused the same way; settling twice is a
no-op.

Handlers that are ``async def`` must use the ``a``-prefixed twins
(``aprogress``, ``asucceed``, ...): Django refuses database access from a
running event loop, so the twins run the same write on a worker thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.db import transaction

from .. import tracing
from ..client.submit import submit as submit_task
from ..client.wait import wait as wait_for_task
from ..protocol import bounds
from ..exceptions import LostLease
from ..protocol.payload import encode
from ..protocol.envelopes import as_envelope
from ..protocol.backoff import retry_delay_ms

if TYPE_CHECKING:
    from ..models import Task
    from ..worker.attempt import Attempt

__all__ = ["AtomicCompletion", "TaskContext"]


class AtomicCompletion:
    """Yielded by ``ctx.atomic()``: set ``result`` to store it with the completion."""

    __slots__ = ("result", "task")

    def __init__(self, result: Any) -> None:
        self.result = result
        self.task: Task | None = None


class TaskContext:
    """Per-task handle a handler uses to report progress, settle, and spawn children."""

    # One slot: everything else is the attempt's, so a batch of 256 costs
    # 256 small views and no copies of the worker's settings.
    __slots__ = ("_attempt",)

    def __init__(self, attempt: Attempt) -> None:
        self._attempt = attempt

    def __repr__(self) -> str:
        return f"<TaskContext {self.name} {self.task_id} attempt={self.attempt}>"

    # ---- read-only view --------------------------------------------------
    @property
    def task(self) -> Task:
        return self._attempt.task

    @property
    def task_id(self) -> str:
        return self._attempt.task.id

    @property
    def name(self) -> str:
        return self._attempt.task.name

    @property
    def queue(self) -> str:
        return self._attempt.task.queue

    @property
    def attempt(self) -> int:
        return self._attempt.task.attempt

    @property
    def max_attempts(self) -> int:
        return self._attempt.task.max_attempts

    @property
    def payload(self) -> Any:
        attempt = self._attempt
        if attempt.payload_deferred:
            attempt.load_payload()
        return attempt.task.payload

    @property
    def metadata(self) -> Any:
        return self._attempt.task.metadata

    def parent_results(self) -> dict[str, Any]:
        """In a workflow node's handler: what its parents returned, by node name (docs/workflows.md).

        A parent that did not succeed is left out; outside a workflow, ``{}``.
        """
        # The workflow modules read the models: not importable while the app registry loads this one.
        from ..workflows.advance import is_node_task
        from ..workflows.run import parent_results  # the same: it reads the models

        if not is_node_task(self._attempt.task.metadata):
            return {}
        return parent_results(self._attempt.task.id)

    @property
    def root_id(self) -> str | None:
        return self._attempt.task.root_id

    @property
    def correlation_id(self) -> str | None:
        return self._attempt.task.correlation_id

    @property
    def parent_id(self) -> str | None:
        return self._attempt.task.parent_id

    @property
    def worker_id(self) -> str:
        return self._attempt.owner.worker_id

    @property
    def settled(self) -> bool:
        """True once this task reached its final state (by the handler or the worker)."""
        return self._attempt.settled

    @property
    def lost_lease(self) -> bool:
        """True once this attempt no longer owns the task; stop side effects."""
        return self._attempt.lost

    @property
    def lease_lost_event(self) -> threading.Event:
        """An event set when the lease is lost, for handlers that want to wait on it."""
        return self._attempt.lost_event()

    @property
    def cancel_requested(self) -> bool:
        """True once a heartbeat or write has seen a cancel request (no query)."""
        return self._attempt.cancel_seen

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
        attempt = self._attempt
        owner = attempt.owner
        return attempt.write(
            lambda: owner.store.progress(attempt.task.id, owner.worker_id, value, message)
        )

    def heartbeat(self) -> Task:
        """Renew this task's lease now (the worker also beats on its own)."""
        attempt = self._attempt
        owner = attempt.owner
        return attempt.write(
            lambda: owner.store.heartbeat(attempt.task.id, owner.worker_id, owner.lease_ms)
        )

    def canceled(self) -> bool:
        """Return True if a cancel was requested (remembered), else re-read the row."""
        attempt = self._attempt
        if attempt.cancel_seen:
            return True
        row = attempt.owner.store.get(attempt.task.id)
        if row is None:
            return True
        attempt.observe_cancel(row.cancel_requested_at_ms)
        return attempt.cancel_seen or row.status == "canceled"

    def succeed(self, result: Any = None) -> Task | None:
        """Settle now as succeeded (``complete``: a pending cancel wins); no-op if settled."""
        attempt = self._attempt
        if attempt.settled:
            return None
        attempt.check_lease()
        result_json = None if result is None else encode(result, what="result")
        owner = attempt.owner
        return self._settle_now(
            lambda: owner.store.complete(attempt.task.id, owner.worker_id, result_json)
        )

    def fail(
        self, error: Any = "task failed", *, retryable: bool = True
    ) -> Task | None:
        """Settle now as failed; retryable failures get the worker's backoff. No-op if settled.

        ``error`` may be a reason string, an exception, a ``TaskError`` (its own
        retryability wins) or a ready envelope dict.
        """
        attempt = self._attempt
        if attempt.settled:
            return None
        attempt.check_lease()
        envelope, retryable = as_envelope(error, retryable)
        tracing.failed(attempt.task.id, envelope)
        owner = attempt.owner
        delay = retry_delay_ms(
            attempt.task.attempt,
            base_ms=owner.retry_backoff_ms,
            max_ms=owner.retry_backoff_max_ms,
            retryable=retryable,
        )
        return self._settle_now(
            lambda: owner.store.fail(
                attempt.task.id,
                owner.worker_id,
                envelope,
                retryable=retryable,
                delay_ms=delay,
            )
        )

    def _settle_now(self, write: Callable[[], Task]) -> Task | None:
        # Reserve, write, record, then tell the worker: another writer (the
        # worker settling the call's leftovers) may already hold the reservation.
        attempt = self._attempt
        if not attempt.begin_settle():
            return None
        row = None
        try:
            row = attempt.settle_write(write)
        finally:
            attempt.end_settle(row.status if row is not None else None)
        attempt.handler_settled(row.status)
        return row

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
        attempt = self._attempt
        owner = attempt.owner
        attempt.check_writable()
        if not attempt.begin_settle():
            raise LostLease(attempt.task.id)
        handle = AtomicCompletion(result)
        status: str | None = None
        try:
            with transaction.atomic(using=owner.store.alias):
                yield handle
                attempt.check_lease()
                result_json = (
                    None
                    if handle.result is None
                    else encode(handle.result, what="result")
                )
                row = attempt.settle_write(
                    lambda: owner.store.complete(
                        attempt.task.id, owner.worker_id, result_json
                    )
                )
                handle.task = row
            status = row.status
        finally:
            attempt.end_settle(status)
        attempt.handler_settled(status)

    def succeed_in(self, write: Callable[[], Any]) -> Task | None:
        """Run ``write()`` and complete this task in one transaction; its return is the result."""
        if self._attempt.settled:
            return None
        with self.atomic() as done:
            done.result = write()
        return done.task

    # ---- children and waiting ----------------------------------------------
    def submit(self, name: Any, payload: Any = None, **options: Any) -> Task:
        """Submit a child task with lineage (parent, root, correlation) wired.

        As with ``submit``, a declared name's queue, priority and
        max_attempts apply unless passed. Refused with ``LostLease`` once the
        lease is lost: the abandoned attempt's retry would create the same
        children again.
        """
        self._attempt.check_lease()
        options.setdefault("parent_id", self.task_id)
        options.setdefault("root_id", self.root_id or self.task_id)
        options.setdefault("correlation_id", self.correlation_id)
        # A ``TaskDefinition`` may stand in for its name.
        return submit_task(getattr(name, "name", name), payload, **options)

    def wait(self, task_id: str, **options: Any) -> Task:
        """Wait for another task to finish (protocol 3.18)."""
        return wait_for_task(task_id, **options)

    # ---- async twins ---------------------------------------------------------
    async def _in_thread(self, fn: Callable[[], Any]) -> Any:
        executor = self._attempt.owner.db_executor
        if executor is None:
            return await asyncio.to_thread(fn)
        # In the handler's context, as ``asyncio.to_thread`` would: a child
        # submitted from here is then part of the handler's trace.
        return await asyncio.get_running_loop().run_in_executor(executor, contextvars.copy_context().run, fn)

    async def aprogress(self, value: float | None, message: str | None = None) -> Task:
        return await self._in_thread(lambda: self.progress(value, message))

    async def aheartbeat(self) -> Task:
        return await self._in_thread(self.heartbeat)

    async def acanceled(self) -> bool:
        if self._attempt.cancel_seen:
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
