"""Run handler calls: a thread pool for sync handlers, an event loop thread for async ones.

The claim loop and the heartbeat never run handler code. No transaction is
open while a handler runs (the worker's writes are on other threads'
connections). Each handler thread applies Django's request-style connection
policy (``close_old_connections``) before and after every call and closes its
connection when it exits.

A call claimed ahead (``CLAIM_AHEAD``) waits for a free slot: a handler
thread, or for an async handler a place under the concurrency. Its clock
(duration, ``max_run_ms``) starts when its handler does, one taken back
before that (``take_back(unstarted=True)``) never runs, and neither does
one whose every task was canceled or lost its lease meanwhile.

``max_run_ms`` bounds a whole call: at the deadline every context of the call
is flagged lease-lost (the abandoned handler can no longer write), async
handlers are cancelled, a sync handler's thread is abandoned and replaced, and
every unsettled task fails retryably with the ``handler_timeout`` envelope.

Each call runs inside its consumer span (``tracing.processing``; nothing
without the ``otel`` extra).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from . import connections as _db
from .. import tracing
from ..protocol.envelopes import timeout_envelope, undecodable_envelope
from .outcomes import RetryBackoff, Settlement, fail_settlement, handler_args, settlements

if TYPE_CHECKING:
    from ..tasks.registry import TaskDefinition
    from .attempt import Attempt
    from .budgets import Source

logger = logging.getLogger("cairnq_django.worker")

RUNNING, RETURNED, ABANDONED = "running", "returned", "abandoned"
# Taken back at shutdown while its handler still ran: its tasks were released
# to the queue, so whatever the handler returns later is not written.
HANDED_BACK = "handed_back"
# At stop, how long the idle handler threads get to end (a busy one is a daemon and is not waited for).
IDLE_THREAD_EXIT_S = 0.5


def _load_payloads(attempts: list[Attempt]) -> None:
    for attempt in attempts:
        attempt.load_payload()


def _deferred(attempts: list[Attempt]) -> bool:
    return any(attempt.payload_deferred for attempt in attempts)


class Call:
    """One handler call: one task, or one batch of tasks of one name."""

    __slots__ = (
        "attempts",
        "deadline",
        "definition",
        "ended",
        "future",
        "nbytes",
        "source",
        "started",
        "state",
    )

    def __init__(
        self,
        definition: TaskDefinition | None,
        source: Source,
        attempts: list[Attempt],
        nbytes: int,
    ) -> None:
        self.definition = definition
        self.source = source
        self.attempts = attempts
        self.nbytes = nbytes
        # Set when a slot takes the call and its handler begins (Executor._begin).
        self.started = 0.0
        self.ended = 0.0
        self.deadline: float | None = None
        self.state = RUNNING
        self.future: Future[Any] | None = None

    @property
    def name(self) -> str:
        return self.attempts[0].task.name

    @property
    def duration_ms(self) -> int:
        if not self.started:
            return 0  # never begun: taken back while it waited for a slot
        end = self.ended or time.monotonic()
        return int((end - self.started) * 1000)


class _DbThreadPool(ThreadPoolExecutor):
    """Threads for the async twins' database writes, each with a tagged connection."""

    def __init__(self, alias: str, application_name: str, max_workers: int) -> None:
        super().__init__(
            max_workers=max_workers,
            thread_name_prefix=f"{application_name}:h",
            initializer=_db.tag_thread,
            initargs=(alias, f"{application_name}:h"),
        )
        self.alias = alias

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        alias = self.alias

        def run() -> Any:
            _db.drop_if_broken(alias)
            return fn(*args, **kwargs)

        return super().submit(run)


class Executor:
    """Start handler calls and hand their outcomes (``outcomes.settlements``) to ``settle``."""

    def __init__(
        self,
        *,
        concurrency: int,
        alias: str,
        application_name: str,
        max_run_ms: int | None,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        settle: Callable[[list[Settlement]], None],
        on_end: Callable[[Call], None],
    ) -> None:
        # Here, before any handler thread exists: a broken opentelemetry
        # install stops the worker at start instead of failing every call.
        tracing.load()
        self.concurrency = concurrency
        self.alias = alias
        self.application_name = application_name
        self.max_run_ms = max_run_ms
        self.backoff = RetryBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self.settle = settle
        self.on_end = on_end
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._counter = itertools.count(1)
        self.abandoned = 0
        # Abandoned sync handler threads still running; past ``zombie_cap`` the
        # process asks to be restarted (``on_fatal``), since Python cannot
        # stop them and each may hold memory, file handles or a connection.
        self.zombies = 0
        self.zombie_cap = max(8, 2 * concurrency)
        self.on_fatal: Callable[[str], None] = lambda reason: None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Async calls past ``concurrency`` (claimed ahead) wait here for a place.
        self._async_slots: asyncio.Semaphore | None = None
        self._loop_thread: threading.Thread | None = None
        self.db_executor: _DbThreadPool | None = None
        self._deadlines: list[tuple[float, int, Call]] = []
        self._deadline_cond = threading.Condition(threading.Lock())
        self._deadline_thread: threading.Thread | None = None
        self._stopping = False
        # Calls submitted whose outcome has not yet reached ``settle`` (or
        # that were taken back): shutdown waits on this, not on freed slots,
        # because a slot frees before the call's settlement is handed over.
        self._open = 0
        self._open_cond = threading.Condition(threading.Lock())

    # ---- lifecycle -------------------------------------------------------------
    def start(self, *, needs_async: bool) -> None:
        for _ in range(self.concurrency):
            self._spawn()
        if needs_async:
            self.db_executor = _DbThreadPool(
                self.alias, self.application_name, self.concurrency + 1
            )
            self._loop = asyncio.new_event_loop()
            self._async_slots = asyncio.Semaphore(self.concurrency)
            self._loop_thread = threading.Thread(
                target=self._loop.run_forever,
                name=f"{self.application_name}:async",
                daemon=True,
            )
            self._loop_thread.start()
        if self.max_run_ms is not None:
            self._deadline_thread = threading.Thread(
                target=self._watch_deadlines,
                name=f"{self.application_name}:deadlines",
                daemon=True,
            )
            self._deadline_thread.start()

    def stop(self) -> None:
        """Let idle handler threads exit; busy ones are daemons and die with the process."""
        self._stopping = True
        for _ in self._threads:
            self._work.put(None)
        with self._deadline_cond:
            self._deadline_cond.notify_all()
        if self._loop is not None:
            loop = self._loop
            for pending in asyncio.all_tasks(loop):
                loop.call_soon_threadsafe(pending.cancel)
            loop.call_soon_threadsafe(loop.stop)
            if self._loop_thread is not None:
                self._loop_thread.join(timeout=2.0)
            if not loop.is_running():
                loop.close()
        if self.db_executor is not None:
            self.db_executor.shutdown(wait=False, cancel_futures=True)
        # Idle threads end at once, closing their connections on the way out:
        # waited for briefly, so a worker run in-process (tests, an embedding
        # program) leaves no handler connection open behind it.
        deadline = time.monotonic() + IDLE_THREAD_EXIT_S
        for thread in list(self._threads):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _spawn(self) -> None:
        thread = threading.Thread(
            target=self._thread_main,
            name=f"{self.application_name}:h{next(self._counter)}",
            daemon=True,
        )
        self._threads.append(thread)
        thread.start()

    # ---- starting calls ------------------------------------------------------------
    def submit(self, call: Call) -> None:
        with self._open_cond:
            self._open += 1
        if call.definition is not None and call.definition.is_async:
            assert self._loop is not None
            call.future = asyncio.run_coroutine_threadsafe(
                self._run_async(call), self._loop
            )
        else:
            self._work.put(call)

    def _thread_main(self) -> None:
        _db.tag_thread(self.alias, f"{self.application_name}:h")
        try:
            while True:
                call = self._work.get()
                if call is None:
                    return
                if not self._begin(call):
                    continue  # released at shutdown before a thread took it
                if self._ended_before_start(call):
                    continue
                self._run_sync(call)
                if call.state == ABANDONED:
                    # A replacement thread took this one's place when the call
                    # was abandoned; the zombie just ends.
                    with self._lock:
                        self.zombies -= 1
                    return
        finally:
            _db.close_quietly(self.alias)

    def _begin(self, call: Call) -> bool:
        """Start ``call``'s clock as a slot takes it; False if it was taken back first."""
        with self._lock:
            if call.state != RUNNING:
                return False
            call.started = time.monotonic()
        if self.max_run_ms is not None:
            call.deadline = call.started + self.max_run_ms / 1000
            with self._deadline_cond:
                heapq.heappush(self._deadlines, (call.deadline, id(call), call))
                self._deadline_cond.notify()
        return True

    def _ended_before_start(self, call: Call) -> bool:
        """End, without running it, a call whose every task was canceled or lost its lease while it waited.

        The completion written for a canceled task ends it ``canceled`` (a
        cancel request wins over any outcome, protocol 3.12); a task whose
        lease is lost is not written at all (``settlements`` skips it).
        """
        if not all(attempt.cancel_seen or attempt.lost for attempt in call.attempts):
            return False
        for attempt in call.attempts:
            task = attempt.task
            why = "lease lost" if attempt.lost else "canceled"
            logger.info("task=%s name=%s %s before its handler started", task.id, task.name, why)
        self._finish(call, None, None)
        return True

    def _run_sync(self, call: Call) -> None:
        definition = call.definition
        assert definition is not None
        _db.handler_thread_reset()
        try:
            attempts = call.attempts
            if _deferred(attempts):
                # Large payloads left in the database by the claim: fetched
                # here, on the handler's thread, before the handler runs.
                _load_payloads(attempts)
                attempts = self._admit(call)
            value = None
            if attempts:
                with tracing.processing(definition, attempts):
                    value = definition.func(*handler_args(definition, attempts))
            raised: BaseException | None = None
        except BaseException as exc:  # noqa: BLE001 - SystemExit from a handler thread is that task's failure
            value, raised = None, exc
        finally:
            _db.handler_thread_reset()
        self._finish(call, value, raised)

    async def _run_async(self, call: Call) -> None:
        assert self._async_slots is not None
        async with self._async_slots:
            if self._begin(call) and not self._ended_before_start(call):
                await self._run_async_begun(call)

    async def _run_async_begun(self, call: Call) -> None:
        definition = call.definition
        assert definition is not None
        try:
            attempts = call.attempts
            if _deferred(attempts):
                # Large payloads left in the database by the claim: fetch them
                # off the event loop (Django refuses queries on it).
                await asyncio.get_running_loop().run_in_executor(
                    self.db_executor, _load_payloads, attempts
                )
                attempts = self._admit(call)
            value = None
            if attempts:
                with tracing.processing(definition, attempts):
                    value = await definition.func(*handler_args(definition, attempts))
            raised: BaseException | None = None
        except asyncio.CancelledError as exc:
            if call.state != RUNNING:
                return  # abandoned at its deadline: the timeout already decided
            value, raised = None, exc
        except BaseException as exc:  # noqa: BLE001
            value, raised = None, exc
        self._finish(call, value, raised)

    def _admit(self, call: Call) -> list[Attempt]:
        """Return the call's tasks the handler may run, once deferred payloads are fetched.

        The claim loop already failed rows whose columns came back undecodable;
        a payload fetched just now (one the claim left in the database) is
        checked here. Each such task fails alone with ``bad_payload``; the
        others of a batch run.
        """
        bad = []
        for attempt in call.attempts:
            failure = undecodable_envelope(attempt.task)
            if failure is not None and attempt.reserve():
                logger.warning(
                    "task=%s name=%s not run: %s", attempt.task.id, attempt.task.name, failure["message"]
                )
                bad.append(fail_settlement(attempt, call, failure, False, self.backoff))
        if not bad:
            return call.attempts
        self.settle(bad)
        settled = {id(item.attempt) for item in bad}
        return [attempt for attempt in call.attempts if id(attempt) not in settled]

    # ---- outcomes ---------------------------------------------------------------------
    def _finish(self, call: Call, value: Any, raised: BaseException | None) -> None:
        with self._lock:
            if call.state != RUNNING:
                return  # abandoned: its outcome was decided to be handler_timeout
            call.state = RETURNED
        try:
            call.ended = time.monotonic()
            for attempt in call.attempts:
                # Let a large payload go now, not when the settlement is written.
                attempt.drop_payload()
            self.on_end(call)
            definition = call.definition
            self.settle(
                settlements(
                    call,
                    call.attempts,
                    value,
                    raised,
                    batch=definition is not None and definition.batch is not None,
                    backoff=self.backoff,
                    log=True,
                )
            )
        finally:
            self._delivered()

    # ---- shutdown ------------------------------------------------------------------------
    def _delivered(self) -> None:
        """Count one call's outcome as handed to ``settle`` (once per call)."""
        with self._open_cond:
            self._open -= 1
            if self._open <= 0:
                self._open_cond.notify_all()

    def wait_delivered(self, timeout: float) -> bool:
        """Wait until every submitted call's outcome reached ``settle``; True if so."""
        deadline = time.monotonic() + timeout
        with self._open_cond:
            while self._open > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._open_cond.wait(left)
            return True

    def take_back(self, call: Call, *, unstarted: bool = False) -> bool:
        """Claim a still-running call for hand-back; False once its handler has ended.

        The same lock decides between this and the handler's return: either
        the handler's outcome is settled, or the tasks are handed back and
        that outcome is dropped, never both and never neither. ``unstarted``:
        only a call whose handler has not begun (claimed ahead, still waiting).
        """
        with self._lock:
            if call.state != RUNNING or (unstarted and call.started):
                return False
            call.state = HANDED_BACK
        self._delivered()
        return True

    # ---- max_run_ms ----------------------------------------------------------------------
    def _watch_deadlines(self) -> None:
        while True:
            with self._deadline_cond:
                while not self._stopping:
                    if self._deadlines:
                        wait = self._deadlines[0][0] - time.monotonic()
                        if wait <= 0:
                            break
                        self._deadline_cond.wait(wait)
                    else:
                        self._deadline_cond.wait()
                if self._stopping:
                    return
                _, _, call = heapq.heappop(self._deadlines)
            if call.state == RUNNING:
                self.abandon(call)

    def abandon(self, call: Call) -> None:
        """Give up on a call that outran ``max_run_ms`` and fail its tasks retryably."""
        with self._lock:
            if call.state != RUNNING:
                return
            call.state = ABANDONED
        call.ended = time.monotonic()
        left = [attempt for attempt in call.attempts if attempt.reserve()]
        # Flag every attempt first: from now on the zombie can neither write nor settle.
        for attempt in call.attempts:
            attempt.mark_lost()
        zombies = 0
        if call.future is not None:
            call.future.cancel()
        else:
            with self._lock:
                self.zombies += 1
                zombies = self.zombies
            self._spawn()
        self.abandoned += 1
        if zombies > self.zombie_cap:
            self.on_fatal(
                f"{zombies} abandoned handler threads are still running (cap {self.zombie_cap})"
            )
        logger.warning(
            "handler timed out: name=%s tasks=%d attempt=%s max_run_ms=%s (abandoned calls so far: %d)",
            call.name,
            len(call.attempts),
            call.attempts[0].task.attempt,
            self.max_run_ms,
            self.abandoned,
        )
        try:
            self.on_end(call)
            envelope = timeout_envelope(call.name, self.max_run_ms or 0)
            self.settle([fail_settlement(attempt, call, envelope, True, self.backoff) for attempt in left])
        finally:
            self._delivered()
