"""Run queued tasks inline in your own tests: ``run_until_idle()`` (docs/testing.md).

The tasks run in the calling thread, on the calling thread's database
connection, through the real handlers and the real store (claim, complete,
fail with the protocol's rules). So it works in a plain ``TestCase`` / a
pytest-django ``db`` test, where the test's transaction hides its rows from
any other connection -- which is exactly why a worker process or thread
could not see them.

What differs from ``cairnq_worker``: one handler call at a time, no heartbeat
(the lease is long instead), no ``max_run_ms``, no per-name or resource
limits, and retryable failures are retried at once (no backoff) unless
``backoff=True``, so a flaky task runs through its attempts in one call.

Outcomes are the worker's: the same envelopes (a handler's exception keeps
its traceback in ``details``), and ``SystemExit`` or ``KeyboardInterrupt``
raised by a handler fails that task instead of leaving the test.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync, sync_to_async

from . import signals
from .worker.attempt import Attempt, AttemptOwner
from .exceptions import LostLease, SerializationError
from .protocol.payload import encode
from .protocol.envelopes import raised_envelope, unserializable_envelope
from .protocol.backoff import retry_delay_ms

if TYPE_CHECKING:
    from .models import Task
    from .tasks.registry import TaskDefinition
    from .store.base import Store

__all__ = ["NotIdle", "run_task", "run_until_idle"]

WORKER_ID = "worker_inline"
# Long enough for any test's handler; nothing renews it inline.
LEASE_MS = 3_600_000


class NotIdle(AssertionError):
    """Tasks were still claimable when ``max_tasks`` or ``timeout`` ran out."""


class _CallerThreadExecutor(concurrent.futures.Executor):
    """Run an async handler's ``ctx.a*()`` writes on the caller's thread and connection.

    ``async_to_sync`` runs the handler on another thread; a thread-sensitive
    ``sync_to_async`` call is sent back to the thread blocked in
    ``async_to_sync`` -- the test's, whose connection holds its transaction.
    """

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        task = asyncio.get_running_loop().create_task(sync_to_async(fn, thread_sensitive=True)(*args, **kwargs))

        def copy(done: asyncio.Task[Any]) -> None:
            if done.cancelled():
                future.cancel()
            elif done.exception() is not None:
                future.set_exception(done.exception())  # type: ignore[arg-type]
            else:
                future.set_result(done.result())

        task.add_done_callback(copy)
        return future


class _InlineOwner(AttemptOwner):
    db_executor = _CallerThreadExecutor()


def _queued_queues(store: Store) -> list[str]:
    from .models import Task as TaskModel

    return sorted(
        set(TaskModel.objects.using(store.alias).filter(status="queued").values_list("queue", flat=True))
    )


def _call(definition: TaskDefinition, attempts: list[Attempt]) -> Any:
    func = definition.func
    if definition.batch is not None:
        args: tuple[Any, ...] = ([attempt.context for attempt in attempts],)
    elif definition.takes_payload:
        args = (attempts[0].context, attempts[0].context.payload)
    else:
        args = (attempts[0].context,)
    if definition.is_async:
        # Inside the event loop the database is off limits: fetch the payloads
        # a claim left in the database now, as the worker does for async calls.
        for attempt in attempts:
            attempt.load_payload()
        return async_to_sync(func)(*args)
    return func(*args)


def _settle(store: Store, definition: TaskDefinition, attempts: list[Attempt], value: Any, raised: BaseException | None, *, backoff: bool) -> list[Task]:
    """Settle what the handler left unsettled by how the call ended (protocol 4.7)."""
    rows: list[Task] = []
    left = [attempt for attempt in attempts if attempt.reserve()]
    if isinstance(raised, LostLease):
        for attempt in left:
            attempt.end_settle(None)
        return rows
    for attempt in left:
        task = attempt.task
        failure: tuple[dict[str, Any], bool] | None = None
        result_json = None
        if raised is None:
            result = value
            if definition.batch is not None:
                result = value.get(task.id) if isinstance(value, dict) else None
            try:
                result_json = None if result is None else encode(result, what="result")
            except SerializationError as exc:
                failure = (unserializable_envelope(str(exc).split(": ", 1)[-1]), False)
        else:
            failure = raised_envelope(raised)
        row = None
        try:
            if failure is None:
                row = store.complete(task.id, WORKER_ID, result_json)
            else:
                envelope, retryable = failure
                delay = retry_delay_ms(task.attempt, retryable=retryable) if backoff else 0
                row = store.fail(task.id, WORKER_ID, envelope, retryable=retryable, delay_ms=delay)
        except LostLease:
            attempt.mark_lost()
        finally:
            attempt.end_settle(row.status if row is not None else None)
        if row is not None:
            rows.append(row)
    return rows


def run_task(store: Store, rows: Sequence[Task], *, backoff: bool = False) -> list[Task]:
    """Run one handler call for claimed ``rows`` (one name) and settle them; return the settled rows."""
    from .models import Task as TaskModel
    from .tasks.registry import get_task
    from .protocol.envelopes import no_handler_envelope

    definition = get_task(rows[0].name)
    if definition is None:
        return [
            store.fail(row.id, WORKER_ID, no_handler_envelope(row.name), retryable=False) for row in rows
        ]
    owner = _InlineOwner(store, WORKER_ID, LEASE_MS)
    attempts = [Attempt(row, owner) for row in rows]
    for row in rows:
        signals.task_started.send(
            sender=TaskModel, task_id=row.id, name=row.name, queue=row.queue, attempt=row.attempt, worker_id=WORKER_ID
        )
    started = time.monotonic()
    value: Any = None
    raised: BaseException | None = None
    try:
        value = _call(definition, attempts)
    except BaseException as exc:  # noqa: BLE001 - as in the worker, SystemExit and KeyboardInterrupt too
        raised = exc
    settled = _settle(store, definition, attempts, value, raised, backoff=backoff)
    duration_ms = int((time.monotonic() - started) * 1000)
    for attempt in attempts:
        if attempt.status is not None:
            task = attempt.task
            signals.task_finished.send(
                sender=TaskModel,
                task_id=task.id,
                name=task.name,
                queue=task.queue,
                attempt=task.attempt,
                worker_id=WORKER_ID,
                status=attempt.status,
                duration_ms=duration_ms,
            )
    return settled


def run_until_idle(
    queues: Sequence[str] | None = None,
    *,
    names: Sequence[str] | None = None,
    max_tasks: int = 1000,
    timeout: float = 60.0,
    backoff: bool = False,
) -> list[Task]:
    """Run queued tasks inline until nothing is claimable; return every attempt's final row, in order.

    ``queues`` None means every queue that has queued tasks (re-read after
    each call, so children submitted to other queues run too). ``names``
    limits the run to those task names (default: every registered handler;
    tasks without a handler stay queued). Delayed tasks that are not due yet
    stay queued. Raises ``NotIdle`` if tasks are still claimable after
    ``max_tasks`` claims or ``timeout`` seconds (a task that re-enqueues itself).
    """
    from .tasks.registry import get_task, registered
    from .store import get_store

    store = get_store()
    wanted = list(names) if names is not None else None
    deadline = time.monotonic() + timeout
    claimed = 0
    settled: list[Task] = []
    while True:
        which = list(queues) if queues is not None else _queued_queues(store)
        known = wanted if wanted is not None else list(registered())
        if not which or not known:
            return settled
        if claimed >= max_tasks or time.monotonic() > deadline:
            if store.has_claimable(which, known):
                raise NotIdle(
                    f"tasks still claimable after {claimed} claims in {timeout} s "
                    f"(max_tasks={max_tasks}); does a task re-enqueue itself?"
                )
            return settled
        rows = store.claim(which, WORKER_ID, lease_ms=LEASE_MS, limit=1, names=known)
        if not rows:
            return settled
        definition = get_task(rows[0].name)
        if definition is not None and definition.batch is not None and definition.batch > 1:
            rows += store.claim(
                which, WORKER_ID, lease_ms=LEASE_MS, limit=min(definition.batch - 1, max_tasks - claimed - 1), names=[rows[0].name]
            )
        claimed += len(rows)
        settled += run_task(store, rows, backoff=backoff)
