"""The ranges every integer, duration and text argument must fall in, defined once.

The API, the ``django.tasks`` backend, the store's own validation, the
management commands and the system checks all ask this module, so a value is
refused by the same rule on SQLite and PostgreSQL, in Python, before anything
reaches the database: PostgreSQL would otherwise raise a raw ``DataError``
that aborts the caller's transaction, and SQLite would store what PostgreSQL
refuses. Pure: no settings, no database (docs/api.md lists the ranges).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

INT4_MIN = -(2**31)
INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1

# The longest delay (and purge age) accepted: 100 years of 365.25 days. "Now"
# plus this stays far inside int8 and inside Python's datetime (year 9999),
# so every stored time can still be shown; the rule does not depend on the
# clock, so the same value is accepted or refused whenever it is submitted.
MAX_DELAY_MS = 36_525 * 86_400_000
# Worker timers (lease, heartbeat, poll interval, run ceiling, backoff) and the
# other *_MS settings: PostgreSQL's statement_timeout, which the worker sets
# from the lease, and SQLite's busy timeout are int4 milliseconds (~24.8 days).
MAX_TIMER_MS = INT4_MAX
# Handler calls in flight per worker process: each is a thread with its own
# database connection, so more than this exhausts the server, not the queue.
MAX_CONCURRENCY = 1024
# The heartbeat never beats faster than this by default (worker/lease.py), and
# a lease must outlast three beats: two may be missed before another worker
# may take the task over.
MIN_BEAT_MS = 50
BEATS_PER_LEASE = 3
MIN_LEASE_MS = BEATS_PER_LEASE * MIN_BEAT_MS

# Longest name, queue, key or correlation id, in UTF-8 bytes: PostgreSQL refuses
# longer values where they are indexed (a b-tree entry tops out near 2.7 kB) or
# announced (NOTIFY carries the queue).
MAX_TEXT_BYTES = 1024


@dataclass(frozen=True)
class IntRange:
    """An inclusive range of ints; bool is refused (True would mean 1)."""

    minimum: int
    maximum: int

    def problem(self, value: Any) -> str | None:
        """Say what is wrong with ``value`` ("must be ..."), or None when it fits."""
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an int from {self.minimum} to {self.maximum}, got {_short(value)}"
        if not self.minimum <= value <= self.maximum:
            return f"must be from {self.minimum} to {self.maximum}, got {_short(value)}"
        return None

    def check(self, value: Any, label: str) -> int:
        """Return ``value``, or raise ``ValueError`` naming ``label``."""
        # The common case, an in-range int, costs two comparisons.
        if type(value) is int and self.minimum <= value <= self.maximum:
            return value
        raise ValueError(f"{label} {self.problem(value)}")


# Protocol columns are int4 (priority, max_attempts); times are int8 ms.
PRIORITY = IntRange(INT4_MIN, INT4_MAX)
MAX_ATTEMPTS = IntRange(1, INT4_MAX)
DELAY_MS = IntRange(0, MAX_DELAY_MS)
AGE_MS = IntRange(0, MAX_DELAY_MS)
# How long a record is kept once it stops changing (a worker's registry row).
KEEP_MS = IntRange(1, MAX_DELAY_MS)
# LIMIT / OFFSET are bigint on PostgreSQL and 64-bit on SQLite.
LIST_LIMIT = IntRange(0, INT8_MAX)
OFFSET = IntRange(0, INT8_MAX)
PURGE_LIMIT = IntRange(1, INT8_MAX)
MAX_DEPTH = IntRange(0, INT8_MAX)
QUEUE_LIMIT = IntRange(1, INT8_MAX)
# Waits: intervals are timers; a timeout is seconds up to the longest delay.
POLL_MS = IntRange(1, MAX_TIMER_MS)
MAX_TIMEOUT_S = MAX_DELAY_MS // 1000
# Worker options.
CONCURRENCY = IntRange(1, MAX_CONCURRENCY)
LEASE_MS = IntRange(1, MAX_TIMER_MS)  # and at least three heartbeats: lease_floor_ms
TIMER_MS = IntRange(1, MAX_TIMER_MS)
BACKOFF_MS = IntRange(0, MAX_TIMER_MS)
WAIT_MS = IntRange(0, MAX_TIMER_MS)
COUNT = IntRange(1, INT4_MAX)  # claim batch, a resource's capacity
CLAIM_AHEAD = IntRange(0, MAX_CONCURRENCY)  # calls a worker may hold beyond its concurrency
BIG_COUNT = IntRange(1, INT8_MAX)  # --max-tasks, byte budgets


def lease_floor_ms(heartbeat_ms: int | None) -> int:
    """The shortest lease the heartbeat can renew: three beats (of 50 ms unless set)."""
    beat = MIN_BEAT_MS if heartbeat_ms is None else max(1, heartbeat_ms)
    return BEATS_PER_LEASE * beat


def seconds_problem(value: Any, maximum: float = MAX_TIMEOUT_S) -> str | None:
    """Say what is wrong with a number of seconds (finite, 0..maximum), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number of seconds from 0 to {maximum:.0f}, got {_short(value)}"
    if isinstance(value, int):
        # Compared as an int: a huge one has no float.
        return None if 0 <= value <= maximum else f"must be from 0 to {maximum:.0f} seconds, got {_short(value)}"
    if not math.isfinite(value) or not 0 <= value <= maximum:
        return f"must be a finite number of seconds from 0 to {maximum:.0f}, got {value!r}"
    return None


def storable_problem(value: Any) -> str | None:
    """Say why a string cannot be stored as text on both databases, or None (any length, may be empty)."""
    if not isinstance(value, str):
        return f"must be a string, got {_short(value)}"
    if "\x00" in value:
        return f"must not contain NUL (\\x00), got {value[:80]!r}"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"must not contain a lone surrogate (not UTF-8), got {value[:80]!r}"
    return None


def text_problem(value: Any) -> str | None:
    """Say what is wrong with a name-like argument, or None when either database can store it.

    Non-empty, no NUL (PostgreSQL text cannot hold it), no lone surrogate
    (not UTF-8: neither database can store it), at most ``MAX_TEXT_BYTES`` of UTF-8.
    """
    if not isinstance(value, str) or not value:
        return f"must be a non-empty string, got {_short(value)}"
    if "\x00" in value:
        return f"must not contain NUL (\\x00), got {value[:80]!r}"
    # ASCII text is one byte a character: its length is its size.
    if value.isascii():
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            return f"must not contain a lone surrogate (not UTF-8), got {value[:80]!r}"
    if size > MAX_TEXT_BYTES:
        return f"must be at most {MAX_TEXT_BYTES} bytes of UTF-8, got {size} bytes starting {value[:40]!r}"
    return None


def check_text(value: Any, label: str, *, optional: bool = False) -> None:
    """Raise ``ValueError`` naming ``label`` unless ``value`` passes ``text_problem``."""
    if value is None and optional:
        return
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(f"{label} {problem}")


def check_fraction(value: Any, label: str) -> float:
    """Return ``value`` as a float from 0.0 to 1.0; raise ``ValueError`` naming ``label``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{label} must be a number from 0.0 to 1.0, got {_short(value)}")
    if not 0 <= value <= 1:  # False for NaN as well; a huge int is compared as an int
        raise ValueError(f"{label} must be a finite number from 0.0 to 1.0, got {_short(value)}")
    return float(value)


def _short(value: Any) -> str:
    """``repr(value)`` cut to a readable length (a huge int or string stays legible)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
