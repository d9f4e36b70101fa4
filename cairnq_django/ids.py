"""Generate protocol identifiers: ``task_`` / ``worker_`` + a ULID (protocol 2.3)."""

from __future__ import annotations

import os
import time

# Crockford base32, upper case, without I, L, O and U.
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DIGIT_PAIRS = [high + low for high in _ALPHABET for low in _ALPHABET]
_PAIR_SHIFTS = tuple(range(120, -10, -10))
_MS_MASK = (1 << 48) - 1


def ulid(now_ms: int | None = None) -> str:
    """Return a 26-character ULID: 48 bits of milliseconds, then 80 random bits."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms & _MS_MASK) << 80 | int.from_bytes(os.urandom(10), "big")
    # 26 digits hold 130 bits (the top two are zero): 13 lookups of two digits
    # each, instead of 26 of one (bulk submits make an id per task).
    return "".join([_DIGIT_PAIRS[(value >> shift) & 1023] for shift in _PAIR_SHIFTS])


def task_id() -> str:
    return "task_" + ulid()


def worker_id() -> str:
    return "worker_" + ulid()
