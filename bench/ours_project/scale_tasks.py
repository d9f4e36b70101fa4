"""Handlers of the scale-out bench (``bench/fleet_scale.py``; registered under ``BENCH_SCALE=1``).

``bench.scale_record`` writes one row per call into ``bench_scale_runs``
(made by the bench, not a migration), so a run can prove that no task was
lost or run twice and can time each pickup from the row's own clock.
``bench.scale_hold`` sleeps, so a worker holds leases while doing nothing else.
"""

from __future__ import annotations

import time
from typing import Any

import _wire

from django.db import connection

import cairnq_django as cairnq

_INSERT = _wire.sql("postgres", "scale_runs_insert")


@cairnq.task("bench.scale_record")
def scale_record(ctx: Any, payload: Any) -> None:
    started_ms = int(time.time() * 1000)
    with connection.cursor() as cur:
        cur.execute(_INSERT, [ctx.task_id, ctx.attempt, started_ms])


@cairnq.task("bench.scale_hold")
def scale_hold(ctx: Any, payload: Any) -> None:
    time.sleep(float(payload["s"]))
