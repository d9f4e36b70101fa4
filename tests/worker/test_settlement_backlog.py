"""A worker whose settlement falls behind its handlers stops claiming until it catches up.

A slot frees when the handler returns, before the settlement is written. A
settler slower than the handlers (here a ``task_finished`` receiver that
sleeps) must hold the claims back: otherwise the worker leases the whole
queue, its heartbeat grows with every lease it holds, and the leases expire.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import cairnq_django as cq
from cairnq_django.models import Task

pytestmark = pytest.mark.django_db(transaction=True)

SLOW_SETTLE_WORKER = str(Path(__file__).with_name("_slow_settle_worker.py"))


def test_claims_wait_while_settlements_pile_up(cairnq_db: Any, start_worker: Any) -> None:
    ids = [cq.submit("demo.noop", {}).id for _ in range(60)]
    worker = start_worker(
        # Claiming ahead would lease the whole (short) queue at once by design.
        "--burst", "--concurrency", "2", "--claim-ahead", "0", "--task", "demo.noop",
        env={"SETTLE_SLEEP_MS": "30"}, script=SLOW_SETTLE_WORKER,
    )
    most = 0
    deadline = time.monotonic() + 60
    while worker.alive():
        most = max(most, Task.objects.filter(id__in=ids, status="running").count())
        assert time.monotonic() < deadline, "the worker did not finish"
        time.sleep(0.02)
    assert worker.wait(10) == 0, worker.output()[-3000:]
    assert Task.objects.filter(id__in=ids, status="succeeded").count() == 60
    # Two slots and twice that waiting for the settler, beside the write in
    # progress: never the whole queue, though every handler returns at once.
    assert 2 <= most <= 16, most
