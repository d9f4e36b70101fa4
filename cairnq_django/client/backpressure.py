"""The submit gate (protocol 4.14): hold submits while a queue is at its depth limit.

Configured by ``CAIRNQ["MAX_QUEUE_DEPTH"]`` (an int for every queue, or
``{queue: int}`` for only the named ones) and ``CAIRNQ["MAX_QUEUE_WAIT_MS"]``.

Each process keeps, per (database alias, queue), a *grant*: submits it may make
without asking the database. When the grant is spent one caller probes
``store.queue_depth(queue, limit)`` and the grant becomes ``min(headroom, 64)``;
callers that arrive while that probe is in flight wait for its answer instead of
probing again. With no headroom a caller re-probes with a backoff
(``FIRST_BACKOFF_MS`` doubling to ``MAX_BACKOFF_MS``), and raises
``QueueFull`` once it has waited ``MAX_QUEUE_WAIT_MS``. The limit is soft: N
processes may overshoot it by up to (N - 1) x 64, because each spends its own
grant without asking.

The state is guarded by one ``threading.Lock`` that is never held across a
query or a sleep, so sync callers on many threads and async callers on an event
loop can share it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from ..protocol import bounds
from ..protocol.backoff import capped_doubling
from ..exceptions import QueueFull

MAX_GRANT = 64
# A full queue is probed again after 250 ms doubling to 5 s.
FIRST_BACKOFF_MS = 250
MAX_BACKOFF_MS = 5_000


def limit_problems(value: Any) -> list[str]:
    """Describe what is wrong with a ``MAX_QUEUE_DEPTH`` value (empty if valid)."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        problems = []
        for queue, limit in value.items():
            if not isinstance(queue, str) or not queue:
                problems.append(f"queue name {queue!r} must be a non-empty string")
            if not _is_limit(limit):
                problems.append(f"limit for queue {queue!r} must be an int >= 1, got {limit!r}")
        return problems
    if not _is_limit(value):
        return [f"must be None, an int >= 1 or a {{queue: int}} dict, got {value!r}"]
    return []


def _is_limit(value: Any) -> bool:
    # bool is an int subclass; True as a depth limit is always a mistake. The
    # upper end is queue_depth's (bigint), so the gate's probe cannot be refused.
    return bounds.QUEUE_LIMIT.problem(value) is None


def configured(config: Mapping[str, Any]) -> bool:
    """Whether any queue may be gated (``MAX_QUEUE_DEPTH`` is set)."""
    return config.get("MAX_QUEUE_DEPTH") is not None


def limit_for(config: Mapping[str, Any], queue: str) -> int | None:
    """Return the depth limit for ``queue``, or None when it is not gated."""
    value = config.get("MAX_QUEUE_DEPTH")
    problems = limit_problems(value)
    if problems:
        # The system check (cairnq.E009) reports this at startup; refuse here too
        # rather than guess what limit was meant.
        raise ImproperlyConfigured(f"CAIRNQ['MAX_QUEUE_DEPTH'] {problems[0]}")
    if value is None:
        return None
    if isinstance(value, Mapping):
        return value.get(queue)
    return int(value)


@dataclass
class _QueueState:
    grant: int = 0
    probe: Future[int] | None = None
    probes: int = 0  # how many probes ran, for diagnostics and tests


@dataclass
class Gate:
    """Per-process grants, keyed by (database alias, queue)."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _queues: dict[tuple[str, str], _QueueState] = field(default_factory=dict)

    def reset(self) -> None:
        """Forget every grant (settings changed, or a test wants a clean slate)."""
        with self._lock:
            self._queues.clear()

    def probes(self, alias: str, queue: str) -> int:
        with self._lock:
            state = self._queues.get((alias, queue))
            return state.probes if state else 0

    # One step of the acquire loop, decided under the lock without any I/O:
    # ("take", None): a unit of grant was taken, go ahead;
    # ("probe", fut): this caller must probe and then publish into fut;
    # ("join", fut): another caller's probe is in flight, wait for fut.
    def _step(self, key: tuple[str, str]) -> tuple[str, Future[int] | None]:
        with self._lock:
            state = self._queues.setdefault(key, _QueueState())
            if state.grant > 0:
                state.grant -= 1
                return "take", None
            if state.probe is not None:
                return "join", state.probe
            state.probe = Future()
            state.probes += 1
            return "probe", state.probe

    def _publish(self, key: tuple[str, str], fut: Future[int], headroom: int | BaseException) -> None:
        with self._lock:
            state = self._queues.setdefault(key, _QueueState())
            if state.probe is fut:
                state.probe = None
            if not isinstance(headroom, BaseException):
                state.grant = min(max(int(headroom), 0), MAX_GRANT)
        if isinstance(headroom, BaseException):
            fut.set_exception(headroom)
        else:
            fut.set_result(int(headroom))

    def acquire(
        self, alias: str, queue: str, limit: int, max_wait_ms: int, probe: Callable[[int], int]
    ) -> None:
        """Take one unit of headroom for ``queue``, blocking (sleeping) while it is full."""
        key = (alias, queue)
        started = time.monotonic()
        waits = 0
        while True:
            action, fut = self._step(key)
            if action == "take":
                return
            assert fut is not None
            if action == "probe":
                try:
                    headroom = probe(limit)
                except BaseException as exc:
                    self._publish(key, fut, exc)
                    raise
                self._publish(key, fut, headroom)
            else:
                # A failed probe of another caller is its error, not ours: retry.
                if fut.exception() is not None:
                    continue
            if self._has_grant(key):
                continue
            waits += 1
            sleep_ms = self._sleep_or_raise(queue, started, max_wait_ms, waits)
            time.sleep(sleep_ms / 1000)

    async def aacquire(
        self,
        alias: str,
        queue: str,
        limit: int,
        max_wait_ms: int,
        probe: Callable[[int], Awaitable[int]],
    ) -> None:
        """Do what ``acquire`` does, sleeping with ``asyncio.sleep``."""
        key = (alias, queue)
        started = time.monotonic()
        waits = 0
        while True:
            action, fut = self._step(key)
            if action == "take":
                return
            assert fut is not None
            if action == "probe":
                try:
                    headroom = await probe(limit)
                except BaseException as exc:
                    self._publish(key, fut, exc)
                    raise
                self._publish(key, fut, headroom)
            else:
                # Shielded so one waiter's cancellation leaves the shared probe alone.
                try:
                    await asyncio.shield(asyncio.wrap_future(fut))
                except asyncio.CancelledError:
                    raise
                except Exception:
                    continue
            if self._has_grant(key):
                continue
            waits += 1
            sleep_ms = self._sleep_or_raise(queue, started, max_wait_ms, waits)
            await asyncio.sleep(sleep_ms / 1000)

    def _has_grant(self, key: tuple[str, str]) -> bool:
        with self._lock:
            state = self._queues.get(key)
            return bool(state and state.grant > 0)

    @staticmethod
    def _sleep_or_raise(queue: str, started: float, max_wait_ms: int, waits: int) -> int:
        """How long the ``waits``-th sleep lasts, cut at the deadline; ``QueueFull`` once it passed."""
        waited_ms = int((time.monotonic() - started) * 1000)
        if waited_ms >= max_wait_ms:
            raise QueueFull(queue, waited_ms)
        return min(capped_doubling(waits, FIRST_BACKOFF_MS, MAX_BACKOFF_MS), max_wait_ms - waited_ms)


gate = Gate()


@receiver(setting_changed)
def _reset_on_settings_change(*, setting: str, **kwargs: Any) -> None:
    # Grants were computed against the old limits (or another database).
    if setting in ("CAIRNQ", "DATABASES"):
        gate.reset()
