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
raised by a handler fails that task instead of leaving the test -- except a
``KeyboardInterrupt`` in a Django ``@task``, which Django's contract lets
through: it leaves ``run_until_idle`` and the task is queued again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync, sync_to_async

from . import signals, tracing
from .exceptions import LostLease
from .models import Task
from .protocol.backoff import DEFAULT_RETRY_BACKOFF_MAX_MS, DEFAULT_RETRY_BACKOFF_MS
from .protocol.envelopes import no_handler_envelope
from .store import get_store
from .tasks.registry import get_task, registered
from .worker.attempt import Attempt, AttemptOwner
from .worker.pickup import pickup_ms
from .worker.outcomes import NO_BACKOFF, RetryBackoff, Settlement, handler_args, settlements

if TYPE_CHECKING:
    from .tasks.registry import TaskDefinition
    from .store.base import Store

__all__ = ["NotIdle", "run_task", "run_until_idle"]

WORKER_ID = "worker_inline"
# Long enough for any test's handler; nothing renews it inline.
LEASE_MS = 3_600_000
# ``backoff=True``: the protocol's default retry delays.
_BACKOFF = RetryBackoff(DEFAULT_RETRY_BACKOFF_MS, DEFAULT_RETRY_BACKOFF_MAX_MS)


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
    return sorted(
        set(Task.objects.using(store.alias).filter(status="queued").values_list("queue", flat=True))
    )


def _perform(definition: TaskDefinition, attempts: list[Attempt]) -> Any:
    """Call the handler on this thread, in its consumer span; an async one through ``async_to_sync``."""
    if definition.is_async:
        # Inside the event loop the database is off limits: fetch the payloads
        # a claim left in the database now, as the worker does for async calls.
        for attempt in attempts:
            attempt.load_payload()
        with tracing.processing(definition, attempts):
            return async_to_sync(definition.func)(*handler_args(definition, attempts))
    with tracing.processing(definition, attempts):
        return definition.func(*handler_args(definition, attempts))


def _write(store: Store, items: list[Settlement]) -> list[Task]:
    """Write each settlement on this thread's connection, in order; return the rows written."""
    rows: list[Task] = []
    for item in items:
        attempt, failure = item.attempt, item.failure
        row = None
        try:
            if item.snoozed:
                row = _snooze(store, item)
            elif failure is None:
                row = store.complete(attempt.task.id, WORKER_ID, item.result_json)
            else:
                row = store.fail(
                    failure.task_id, WORKER_ID, failure.error, retryable=failure.retryable, delay_ms=failure.delay_ms
                )
        except LostLease:
            attempt.mark_lost()
        finally:
            attempt.end_settle(row.status if row is not None else None)
        if row is not None:
            rows.append(row)
    return rows


def _snooze(store: Store, item: Settlement) -> Task:
    """Write one snooze and return the row it left (``LostLease`` if not ours)."""
    task_id = item.attempt.task.id
    if task_id not in store.snooze_many(WORKER_ID, [(task_id, item.snooze_ms or 0)]):
        raise LostLease(task_id)
    row = store.get(task_id)
    if row is None:  # purged in between by another connection
        raise LostLease(task_id)
    return row


def _is_django_task(definition: TaskDefinition) -> bool:
    """True for the handler ``cairnq_django.backends`` registers for a Django ``@task``."""
    return getattr(definition.func, "_cairnq_django_task", None) is not None


def run_task(store: Store, rows: Sequence[Task], *, backoff: bool = False) -> list[Task]:
    """Run one handler call for claimed ``rows`` (one name) and settle them; return the settled rows."""
    definition = get_task(rows[0].name)
    if definition is None:
        return [
            store.fail(row.id, WORKER_ID, no_handler_envelope(row.name), retryable=False) for row in rows
        ]
    owner = _InlineOwner(store, WORKER_ID, LEASE_MS)
    attempts = [Attempt(row, owner) for row in rows]
    for row in rows:
        signals.task_started.send(
            sender=Task, task_id=row.id, name=row.name, queue=row.queue, attempt=row.attempt, worker_id=WORKER_ID,
            pickup_ms=pickup_ms(row),
        )
    started = time.monotonic()
    value: Any = None
    raised: BaseException | None = None
    try:
        value = _perform(definition, attempts)
    except KeyboardInterrupt as exc:
        if not _is_django_task(definition):
            raised = exc  # a cairnq handler's: that task's failure, as in the worker
        else:
            # Django's contract (its ImmediateBackend): an interrupt in a task
            # reaches the caller, here maybe the user's Ctrl-C. The task goes
            # back to the queue unfinished, as a worker hands back what it
            # cannot finish.
            store.release([row.id for row in rows], WORKER_ID)
            raise
    except BaseException as exc:  # noqa: BLE001 - as in the worker, SystemExit too
        raised = exc
    items = settlements(
        None,
        attempts,
        value,
        raised,
        batch=definition.batch is not None,
        backoff=_BACKOFF if backoff else NO_BACKOFF,
        log=False,
    )
    settled = _write(store, items)
    duration_ms = int((time.monotonic() - started) * 1000)
    snoozed = {id(item.attempt): item.snooze_ms for item in items if item.snoozed}
    for attempt in attempts:
        task = attempt.task
        if id(attempt) in snoozed and attempt.status == "queued":
            signals.task_snoozed.send(
                sender=Task,
                task_id=task.id,
                name=task.name,
                queue=task.queue,
                attempt=task.attempt,
                worker_id=WORKER_ID,
                delay_ms=snoozed[id(attempt)],
                duration_ms=duration_ms,
            )
        elif attempt.status is not None:
            signals.task_finished.send(
                sender=Task,
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
