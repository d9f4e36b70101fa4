"""Pin that the first calls into tracing, made by many threads at once, all work without opentelemetry.

Issue 35: a worker without the ``otel`` extra at ``--concurrency 4`` failed a
handler call before it ran (``ImportError: cannot import name 'consumer'
from 'cairnq_django.tracing'``): its handler threads all made their first
call at once, and each imported the span modules, whose import fails; a
thread arriving while another's import failed could get the discarded
half-run module. Only a fresh interpreter has a first call, so each round
is a new subprocess with opentelemetry hidden (``tests/_without_otel.py``)
in which 16 threads, released together, call the entry points the worker's
handler threads and the client call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._without_otel import REPO, without_otel_pythonpath

ROUNDS = 12
THREADS = 16

SCRIPT = r"""
import json, sys, threading

import django
django.setup()

from cairnq_django import tracing
from cairnq_django.tasks.registry import get_task

definition = get_task("demo.noop")
threads = int(sys.argv[1])
start = threading.Barrier(threads)
errors = []


def first_call(index):
    start.wait()
    try:
        kind = index % 3
        if kind == 0:  # a handler call (worker/executor.py)
            with tracing.processing(definition, []):
                pass
        elif kind == 1:  # a submit (client/submit.py)
            with tracing.publishing("default", "demo.noop") as publication:
                publication.published([])
        else:  # a handler failing its task itself (ctx.fail)
            tracing.failed("task_0", {"type": "Boom", "message": "boom"})
    except BaseException as exc:
        errors.append(f"{type(exc).__name__}: {exc}")


workers = [threading.Thread(target=first_call, args=(index,)) for index in range(threads)]
for thread in workers:
    thread.start()
for thread in workers:
    thread.join()
print(json.dumps({
    "errors": errors,
    "state": repr(tracing._modules),
    "imported": sorted(name for name in sys.modules if name.startswith("opentelemetry")),
}))
"""


def _round(pythonpath: str) -> dict[str, object]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = pythonpath
    env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(THREADS)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_simultaneous_first_calls_without_opentelemetry_all_work(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry")  # the blocker must hide something that is there
    pythonpath = without_otel_pythonpath(tmp_path / "no_otel", switch_interval=1e-6)
    failed_rounds = []
    for number in range(ROUNDS):
        seen = _round(pythonpath)
        assert seen["imported"] == [], seen
        assert seen["state"] == "False", seen  # loaded once: "opentelemetry-api is not installed"
        if seen["errors"]:
            failed_rounds.append((number, seen["errors"]))
    assert failed_rounds == [], f"{len(failed_rounds)} of {ROUNDS} fresh interpreters: {failed_rounds}"
