"""Capped exponential backoff, with or without equal jitter, defined once.

Every retry in the package waits by this rule, each caller with its own
constants: a failed task's next attempt (protocol 4.11, ``retry_delay_ms``),
a database that went away, a locked SQLite file, a lost LISTEN connection, a
database not yet up at worker start, a full queue at the submit gate.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

DEFAULT_RETRY_BACKOFF_MS = 1_000
DEFAULT_RETRY_BACKOFF_MAX_MS = 30_000

N = TypeVar("N", int, float)

# Past this many doublings any base exceeds any cap a caller uses.
_MAX_EXPONENT = 62


def capped_doubling(step: int, first: N, cap: N) -> N:
    """The window of the ``step``-th wait (1-based): ``first`` doubled ``step - 1`` times, at most ``cap``."""
    exponent = max(0, step - 1)
    # Cap the exponent first: 2**step for a wait repeated thousands of times
    # would otherwise build a huge integer (or overflow a float).
    if exponent >= _MAX_EXPONENT:
        return cap
    return min(cap, first * (1 << exponent))


def equal_jitter(window: float, uniform: Callable[[], float] = random.random) -> float:
    """A delay in the upper half of ``window``: at least half of it, so waits still grow,
    and a uniform share of the rest, so callers that failed together spread out."""
    return window / 2 + uniform() * window / 2


def equal_jitter_ms(window: int, uniform: Callable[[], float] = random.random) -> int:
    """``equal_jitter`` in whole milliseconds (the floor is the window's integer half)."""
    floor = window // 2
    return floor + int(uniform() * (window - floor))


def retry_delay_ms(
    attempt: int,
    *,
    base_ms: int = DEFAULT_RETRY_BACKOFF_MS,
    max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS,
    retryable: bool = True,
    uniform: Callable[[], float] = random.random,
) -> int:
    """Return the delay before the next attempt of a task whose ``attempt`` just failed.

    The window doubles per attempt up to ``max_ms``, with equal jitter so
    retries of many tasks that failed together spread out instead of
    stampeding. A base of 0 (or less) disables backoff, and a non-retryable
    failure has no next attempt to delay.
    """
    if base_ms <= 0 or not retryable:
        return 0
    return equal_jitter_ms(capped_doubling(attempt, base_ms, max_ms), uniform)


class Backoff:
    """The delays of one run of consecutive failures, in seconds; ``reset`` ends the run."""

    def __init__(
        self,
        first: float,
        cap: float,
        *,
        jitter: bool = True,
        uniform: Callable[[], float] = random.random,
    ) -> None:
        self.first = first
        self.cap = cap
        self.jitter = jitter
        self.uniform = uniform
        self.failures = 0
        # When the run began (monotonic seconds), for "down for N s" reports.
        self.since: float | None = None

    def next_delay(self) -> float:
        """Count one more failure and return how long to wait before trying again."""
        self.failures += 1
        if self.since is None:
            self.since = time.monotonic()
        window = capped_doubling(self.failures, self.first, self.cap)
        return equal_jitter(window, self.uniform) if self.jitter else window

    def reset(self) -> bool:
        """Forget past failures; return True if there were any (an outage ended)."""
        had = self.failures > 0
        self.failures = 0
        self.since = None
        return had
