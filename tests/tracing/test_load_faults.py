"""Pin what counts as "opentelemetry-api is not installed" when tracing loads its span modules.

Not installed means no tracing: the ``opentelemetry`` namespace missing, or
there (another opentelemetry distribution) without the api in it. An api
that is installed but fails to import is a fault and is raised, by the
first call and by every call after it, and a worker's executor raises it as
it is made, before any handler thread runs. Each case runs in a fresh
interpreter, since only the first call loads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests._without_otel import REPO

# An ``opentelemetry`` namespace package with nothing in it, in place of the installed one.
NAMESPACE_WITHOUT_API = r"""
import importlib.machinery, json, sys, tempfile

empty = tempfile.mkdtemp()


class OnlyTheNamespace:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry":
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [empty]
            return spec
        return None


sys.meta_path.insert(0, OnlyTheNamespace())

import django
django.setup()

from cairnq_django import tracing

with tracing.publishing("default", "demo.noop") as publication:
    untraced = publication is tracing.UNTRACED
print(json.dumps({"untraced": untraced, "state": repr(tracing._modules)}))
"""

# The api installed, but one module the span modules use is missing: a broken install.
BROKEN_API = r"""
import json, sys


class MissingPropagator:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry.trace.propagation.tracecontext":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, MissingPropagator())

import django
django.setup()

from cairnq_django import tracing
from cairnq_django.tasks.registry import get_task
from cairnq_django.worker.executor import Executor

raised = []
for attempt in (
    tracing.load,
    lambda: tracing.processing(get_task("demo.noop"), []),
    lambda: Executor(
        concurrency=1, alias="default", application_name="test", max_run_ms=None, retry_backoff_ms=0,
        retry_backoff_max_ms=0, settle=lambda settlements: None, on_end=lambda call: None,
    ),
):
    try:
        attempt()
    except ModuleNotFoundError as exc:
        raised.append(exc.name)
    else:
        raised.append(None)
print(json.dumps({"raised": raised, "state": repr(tracing._modules)}))
"""


def _run(script: str) -> dict[str, object]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_an_opentelemetry_namespace_without_the_api_is_not_installed() -> None:
    assert _run(NAMESPACE_WITHOUT_API) == {"untraced": True, "state": "False"}


def test_an_installed_api_that_fails_to_import_is_raised_every_time() -> None:
    pytest.importorskip("opentelemetry.trace")  # the broken install is the real one, one module hidden
    missing = "opentelemetry.trace.propagation.tracecontext"
    assert _run(BROKEN_API) == {"raised": [missing, missing, missing], "state": "None"}
