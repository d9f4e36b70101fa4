"""Poll a task until it is terminal (protocol 3.18), in a sync and an async form.

Both forms share one decision function, so the blocking ``wait`` and the
event-loop friendly ``await_task`` cannot drift apart: they differ only in how
they probe (a direct call vs. ``sync_to_async``) and how they sleep
(``time.sleep`` vs. ``asyncio.sleep``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ..protocol import bounds
from ..protocol.validation import TERMINAL_STATUSES
from ..exceptions import TaskTimeout

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
class _Poller:
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

    def timeout_error(self, ref: TaskRef | None, snapshot: Any) -> TaskTimeout:
        task_id = ref.id if ref is not None else self.subject_id
        return TaskTimeout(task_id, snapshot, key=self.key)

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
    state = _Poller(subject_id, key, timeout, poll_ms, max_poll_ms)
    while True:
        ref = probe()
        remaining = state.remaining()
        row = read() if state.wants_read(ref, remaining) else None
        # A purge or a repointed key between probe and read: not finished yet.
        if row is not None and row.is_terminal:
            return row
        if remaining <= 0:
            raise state.timeout_error(ref, row)
        time.sleep(state.next_sleep(remaining))


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
    """Await the same condition as ``poll`` without ever blocking the event loop."""
    validate(timeout, poll_ms, max_poll_ms)
    state = _Poller(subject_id, key, timeout, poll_ms, max_poll_ms)
    while True:
        ref = await probe()
        remaining = state.remaining()
        row = await read() if state.wants_read(ref, remaining) else None
        if row is not None and row.is_terminal:
            return row
        if remaining <= 0:
            raise state.timeout_error(ref, row)
        await asyncio.sleep(state.next_sleep(remaining))
