"""Pin that without opentelemetry nothing changes and nothing of it is imported.

A subprocess hides every ``opentelemetry`` module behind a ``sys.meta_path``
finder (as if the extra were not installed), then submits, runs tasks inline
and through a worker's executor, and reports what it saw: the rows ran, their
metadata is exactly what was submitted, and no ``opentelemetry`` module was
ever imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import json, sys

class Blocker:
    """Refuse every opentelemetry module, as an interpreter without the package would."""
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
for name in [m for m in sys.modules if m.startswith("opentelemetry")]:
    del sys.modules[name]

import django
django.setup()

import cairnq_django as cq
from asgiref.sync import async_to_sync
from cairnq_django.testing import run_until_idle

try:
    import cairnq_django.tracing.producer
    blocked = False
except ModuleNotFoundError:
    blocked = True

rows = [
    cq.submit("demo.noop", {"result": 1}, metadata={"origin": "plain"}),
    *cq.submit_many([("demo.noop", {"result": 2}), ("demo.noop", {"result": 3})]),
    async_to_sync(cq.asubmit)("demo.async_echo", {"n": 4}),
    *async_to_sync(cq.asubmit_many)([("demo.noop", {"result": 5})]),
]
run_until_idle(names=["demo.noop", "demo.async_echo"])
# And the worker's own executor: its handler threads and event loop.
from django.core.management import call_command
rows += [cq.submit("demo.noop", {"result": 6}), cq.submit("demo.async_echo", {"n": 7})]
call_command("cairnq_worker", "--burst")
done = [cq.get(row.id) for row in rows]
print(json.dumps({
    "blocked": blocked,
    "statuses": [row.status for row in done],
    "metadata": [row.metadata for row in done],
    "imported": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
}))
'''


def test_without_opentelemetry_nothing_is_imported_and_tasks_run(
    cairnq_db: Any, subprocess_env: dict[str, str]
) -> None:
    pytest.importorskip("opentelemetry")  # the blocker must hide something that is there
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, env=subprocess_env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["blocked"] is True
    assert seen["statuses"] == ["succeeded"] * 7
    assert seen["metadata"] == [{"origin": "plain"}, {}, {}, {}, {}, {}, {}]
    assert seen["imported"] == []
