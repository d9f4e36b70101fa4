"""Compute retry delays: exponential backoff with equal jitter (protocol 4.11)."""

from __future__ import annotations

import random
from collections.abc import Callable

DEFAULT_RETRY_BACKOFF_MS = 1_000
DEFAULT_RETRY_BACKOFF_MAX_MS = 30_000


def retry_delay_ms(
    attempt: int,
    *,
    base_ms: int = DEFAULT_RETRY_BACKOFF_MS,
    max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS,
    retryable: bool = True,
    uniform: Callable[[], float] = random.random,
) -> int:
    """Return the delay before the next attempt of a task whose ``attempt`` just failed.

    The window doubles per attempt up to ``max_ms``; the delay is its upper
    half plus a uniform share of the rest, so retries of many tasks that failed
    together spread out instead of stampeding. A base of 0 (or less) disables
    backoff, and a non-retryable failure has no next attempt to delay.
    """
    if base_ms <= 0 or not retryable:
        return 0
    exponent = max(0, attempt - 1)
    # Cap the exponent first: 2**attempt for a task retried thousands of times
    # would otherwise build a needlessly huge integer.
    window = max_ms if exponent >= 62 else min(max_ms, base_ms * (1 << exponent))
    floor = window // 2
    return floor + int(uniform() * (window - floor))
