"""Handlers with fleet limits, for the fleet metric only (``BENCH_FLEET=1``; see ``tasks.py``)."""

from __future__ import annotations

from typing import Any

import _wire

import cairnq_django as cairnq

_count = 0


# A limit no drain reaches: the claim counts the fleet's calls and logs each
# start, and never holds a task back.
@cairnq.task("bench.noop_limited", global_concurrency=1_000_000)
def noop_limited(ctx: Any, payload: Any) -> None:
    global _count
    _count += 1
    _wire.started(payload, _count)


# One call at a time per payload "k": the keyed claim's latency is timed on it.
@cairnq.task("bench.noop_keyed", global_concurrency=1, limit_key="k")
def noop_keyed(ctx: Any, payload: Any) -> None:
    global _count
    _count += 1
    _wire.started(payload, _count)
