"""Shift this process's wall clock (``time.time``/``time.time_ns``) for the clock-skew cases.

Loaded only by worker subprocesses whose ``PYTHONPATH`` starts with this
folder. The offset in seconds comes from ``$CAIRNQ_TEST_CLOCK_OFFSET_S`` or,
re-read every 50 ms, from the file ``$CAIRNQ_TEST_CLOCK_FILE`` (so a test can
step every worker's clock mid-run). The monotonic clock is untouched, as with
an NTP step; libfaketime cannot do that without breaking Python's sleeps.
"""

from __future__ import annotations

import os
import time

_real_time = time.time
_real_time_ns = time.time_ns
_file = os.environ.get("CAIRNQ_TEST_CLOCK_FILE")
_fixed = float(os.environ.get("CAIRNQ_TEST_CLOCK_OFFSET_S", "0") or 0)
_cache = [0.0, -1.0]  # offset, monotonic time read


def _offset() -> float:
    if not _file:
        return _fixed
    now = time.monotonic()
    if now - _cache[1] > 0.05:
        try:
            with open(_file) as handle:
                _cache[0] = float(handle.read().strip() or 0)
        except (OSError, ValueError):
            pass
        _cache[1] = now
    return _cache[0]


def _time() -> float:
    return _real_time() + _offset()


def _time_ns() -> int:
    return _real_time_ns() + int(_offset() * 1e9)


if _file or _fixed:
    time.time = _time
    time.time_ns = _time_ns
