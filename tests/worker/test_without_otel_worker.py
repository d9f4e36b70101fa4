"""Pin issue 35 end to end: a worker without the ``otel`` extra runs every task at its first attempt.

Its handler threads all start their first call at once. Before the fix each
loaded the tracing modules itself, and one could fail its call before the
handler ran (``ImportError: cannot import name 'consumer'``): a task with
``max_attempts=1`` ended failed without having run. Here real
``manage.py cairnq_worker --burst --concurrency 8`` processes, with
opentelemetry hidden (``tests/_without_otel.py``), each drain 16 such tasks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import cairnq_django as cq

from tests._without_otel import without_otel_pythonpath

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = 5
TASKS = 16


def test_a_worker_without_opentelemetry_runs_each_task_at_its_first_attempt(
    cairnq_db: Any, start_worker: Any, tmp_path: Path
) -> None:
    pytest.importorskip("opentelemetry")  # the blocker must hide something that is there
    pythonpath = without_otel_pythonpath(tmp_path / "no_otel", switch_interval=1e-6)
    for _ in range(WORKERS):
        rows = [cq.submit("demo.noop", {"result": n}, max_attempts=1) for n in range(TASKS)]
        worker = start_worker("--burst", "--concurrency", "8", env={"PYTHONPATH": pythonpath})
        assert worker.wait(timeout=60) == 0, worker.output()[-3000:]
        assert "opentelemetry modules imported: []" in worker.output(), worker.output()[-3000:]
        done = [cq.get(row.id) for row in rows]
        outcomes = [(task.status, task.attempt, task.result) for task in done]
        assert outcomes == [("succeeded", 1, n) for n in range(TASKS)], [task.error for task in done]
