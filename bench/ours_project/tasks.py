"""The handlers the cairnq-django worker runs in the benchmark; each reports its start."""

from __future__ import annotations

import os
import time
from typing import Any

import _wire

import cairnq_django as cairnq

BATCH = int(os.environ.get("BENCH_BATCH", "256"))
_count = 0


@cairnq.task("bench.noop")
def noop(ctx: Any, payload: Any) -> None:
    global _count
    _count += 1
    _wire.started(payload, _count)


@cairnq.task("bench.noop_batch", batch=BATCH)
def noop_batch(ctxs: list[Any]) -> None:
    global _count
    _count += len(ctxs)
    _wire.started(ctxs[0].payload, _count)


@cairnq.task("bench.big")
def big(ctx: Any, payload: Any) -> None:
    # Hold the 1 MB payload a moment so several are in flight at once and the
    # byte budget, not the handler's speed, bounds the worker's memory.
    global _count
    _count += 1
    _wire.started(None, _count)
    time.sleep(0.02)


# Only the fleet metric's processes register the fleet-limited handlers: every
# other metric's worker keeps exactly the claim sources it had before them.
if os.environ.get("BENCH_FLEET") == "1":
    from . import fleet_tasks  # noqa: F401
# Likewise the scale-out bench's handlers (bench/fleet_scale.py, issue 21).
if os.environ.get("BENCH_SCALE") == "1":
    from . import scale_tasks  # noqa: F401
