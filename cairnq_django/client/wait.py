"""Wait for a task to be terminal (protocol 3.18): ``wait``, ``wait_by_key``, ``call``, ``outcome``.

The poll's decisions (when to read the whole row, how long to sleep, when to
give up) live in ``Poller``, which the async twins in ``client/async_api.py``
share, so the blocking ``wait`` and the event-loop friendly ``await_task``
cannot drift apart: they differ only in how they probe (a direct call vs.
``sync_to_async``) and how they sleep (``time.sleep`` vs. ``asyncio.sleep``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ..exceptions import SerializationError, TaskCanceled, TaskFailed, TaskTimeout
from ..protocol import bounds
from ..protocol.envelopes import unreadable_error_envelope
from ..protocol.payload import Undecodable
from ..protocol.validation import TERMINAL_STATUSES
from ..store import get_store
from .schema_guard import needs_schema
from .submit import submit
from .unserved import timeout_hint

if TYPE_CHECKING:
    from ..models import Task

TERMINAL = frozenset(TERMINAL_STATUSES)

DEFAULT_TIMEOUT = 30.0
DEFAULT_POLL_MS = 100
DEFAULT_MAX_POLL_MS = 500


class TaskRef(NamedTuple):
    """The status probe's answer: only the id and the status."""

    id: str
    status: str

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL


def task_ref(answer: tuple[str, str] | None) -> TaskRef | None:
    """The store's ``(id, status)`` answer as a ``TaskRef`` (None stays None)."""
    return None if answer is None else TaskRef(*answer)


def next_interval(current_ms: int, max_ms: int) -> int:
    """Return the next poll interval: grow by half, by at least 1 ms, up to ``max_ms``."""
    # The +1 matters for tiny intervals, where int(1 * 1.5) would never grow.
    return min(max_ms, max(current_ms + 1, math.floor(current_ms * 1.5)))


def validate(timeout: float | None, poll_ms: int, max_poll_ms: int) -> None:
    """Reject wait arguments that would spin, never sleep or never end (NaN)."""
    if timeout is not None:
        problem = bounds.seconds_problem(timeout)
        if problem is not None:
            raise ValueError(f"timeout must be None (wait forever) or {problem.removeprefix('must be ')}")
    bounds.POLL_MS.check(poll_ms, "poll_ms")
    bounds.POLL_MS.check(max_poll_ms, "max_poll_ms")


@dataclass
class Poller:
    """The state of one wait: its deadline, next interval and subject."""

    subject_id: str | None
    key: str | None
    timeout: float | None
    interval_ms: int
    max_poll_ms: int

    def __post_init__(self) -> None:
        self.deadline = None if self.timeout is None else time.monotonic() + self.timeout

    def remaining(self) -> float:
        return math.inf if self.deadline is None else self.deadline - time.monotonic()

    def wants_read(self, ref: TaskRef | None, remaining: float) -> bool:
        # Read the whole row only when it can end the wait: the probe says
        # terminal, or the deadline passed and the error wants a snapshot.
        return ref is not None and (ref.is_terminal or remaining <= 0)

    def timeout_error(self, ref: TaskRef | None, snapshot: Any, hint: str | None = None) -> TaskTimeout:
        task_id = ref.id if ref is not None else self.subject_id
        return TaskTimeout(task_id, snapshot, key=self.key, hint=hint)

    def next_sleep(self, remaining: float) -> float:
        seconds = min(self.interval_ms / 1000, remaining)
        self.interval_ms = next_interval(self.interval_ms, self.max_poll_ms)
        return seconds


def poll(
    probe: Callable[[], TaskRef | None],
    read: Callable[[], Task | None],
    *,
    subject_id: str | None,
    key: str | None,
    timeout: float | None,
    poll_ms: int,
    max_poll_ms: int,
) -> Task:
    """Block until ``probe`` reports a terminal task whose full row ``read`` confirms."""
    validate(timeout, poll_ms, max_poll_ms)
    state = Poller(subject_id, key, timeout, poll_ms, max_poll_ms)
    while True:
        ref = probe()
        remaining = state.remaining()
        row = read() if state.wants_read(ref, remaining) else None
        # A purge or a repointed key between probe and read: not finished yet.
        if row is not None and row.is_terminal:
            return row
        if remaining <= 0:
            raise state.timeout_error(ref, row, timeout_hint(row))
        time.sleep(state.next_sleep(remaining))


@needs_schema
def wait(
    task_id: str,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    poll_ms: int = DEFAULT_POLL_MS,
    max_poll_ms: int = DEFAULT_MAX_POLL_MS,
) -> Task:
    """Block until the task is terminal and return it (any terminal status).

    ``timeout`` is in seconds (None waits forever). On the deadline raises
    ``TaskTimeout`` (with ``task_id`` and a ``snapshot`` of the row); the task
    itself is not touched and keeps running.
    """
    bounds.check_text(task_id, "task_id")
    store = get_store()
    return poll(
        lambda: task_ref(store.get_status(task_id)),
        lambda: store.get(task_id),
        subject_id=task_id,
        key=None,
        timeout=timeout,
        poll_ms=poll_ms,
        max_poll_ms=max_poll_ms,
    )


@needs_schema
def wait_by_key(
    key: str,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    poll_ms: int = DEFAULT_POLL_MS,
    max_poll_ms: int = DEFAULT_MAX_POLL_MS,
) -> Task:
    """Wait for whatever task the key points at; re-resolved on every poll.

    A key that names nothing yet is simply not finished, and a ``replace``
    during the wait moves the wait onto the new task.
    """
    bounds.check_text(key, "key")
    store = get_store()
    return poll(
        lambda: task_ref(store.get_status_by_key(key)),
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
    timeout: float | None = DEFAULT_TIMEOUT,
    poll_ms: int = DEFAULT_POLL_MS,
    max_poll_ms: int = DEFAULT_MAX_POLL_MS,
    **options: Any,
) -> Any:
    """Submit a task, wait for it and return its result.

    Raises ``TaskFailed`` (envelope members as attributes), ``TaskCanceled``
    or ``TaskTimeout``; after a timeout the task keeps running and
    ``wait(exc.task_id)`` picks the wait up again. Do not call this inside
    ``transaction.atomic()``: no worker can see the task before the commit.
    """
    validate(timeout, poll_ms, max_poll_ms)
    task = submit(name, payload, **options)
    final = wait(task.id, timeout=timeout, poll_ms=poll_ms, max_poll_ms=max_poll_ms)
    return outcome(final)
