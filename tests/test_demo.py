"""Pin the README's first command: the demo pipeline runs end to end with a
real worker process and every stage's tasks succeed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from cairnq_django.models import Task
from testproject.pipeline.models import IndexedDocument

ROOT = Path(__file__).resolve().parent.parent


def test_demo_pipeline_runs_end_to_end(subprocess_env: dict[str, str], cairnq_db: Any) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "cairnq_demo", "--documents", "12", "--timeout", "90"],
        cwd=ROOT, env=subprocess_env, capture_output=True, text=True, timeout=150,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Pipeline finished" in done.stdout
    statuses = list(Task.objects.values_list("name", "status"))
    assert len(statuses) == 36
    assert {status for _, status in statuses} == {"succeeded"}
    assert IndexedDocument.objects.count() == 12
    # Children inherit the run's correlation id, so the demo can follow them.
    assert Task.objects.exclude(correlation_id__startswith="demo-").count() == 0
