"""Generate protocol identifiers: ``task_`` / ``worker_`` + a ULID (protocol 2.3)."""

from __future__ import annotations

import os
import time

# Crockford base32, upper case, without I, L, O and U.
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid(now_ms: int | None = None) -> str:
    """Return a 26-character ULID: 48 bits of milliseconds, then 80 random bits."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms & ((1 << 48) - 1)) << 80 | int.from_bytes(os.urandom(10), "big")
    digits = []
    for _ in range(26):
        digits.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(digits))


def task_id() -> str:
    return "task_" + ulid()


def worker_id() -> str:
    return "worker_" + ulid()
