"""What tracing costs a submit and a handler call (issue 20; figures in docs/performance.md).

Usage (from the repository root; the SQLite file is created and migrated):

    DATABASE_URL=sqlite:////tmp/tracing-bench.sqlite3 \\
        .venv/bin/python bench/tracing_overhead.py [--calls 2000] [--rounds 5]

Three states, per call in µs (median of the rounds):

* ``absent``: as without the ``otel`` extra (``tracing`` told the import failed);
* ``api``: opentelemetry-api loaded, no tracer provider configured;
* ``sdk``: the SDK's provider with a span processor whose exporter drops
  every span (the cost of recording, not of shipping); measured last, since
  a process sets its provider once.

For each: the tracing hooks alone (one submit's publication, one handler
call's span, no database) and a whole ``submit`` on SQLite. ``absent`` and
``api`` alternate round by round so drift on a shared machine hits both.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

import cairnq_django as cq  # noqa: E402
from cairnq_django import tracing  # noqa: E402
from cairnq_django.models import Task  # noqa: E402
from cairnq_django.store.base import SubmitSpec  # noqa: E402
from cairnq_django.tasks.registry import get_task  # noqa: E402
from cairnq_django.worker.attempt import Attempt, AttemptOwner  # noqa: E402

NAME = "demo.noop"


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls * 1e6


def hooks() -> tuple[Callable[[], None], Callable[[], None]]:
    """One submit's publication and one handler call's span, on objects built once."""
    spec = SubmitSpec(name=NAME, payload_json="{}")
    row = Task(id="task_01JBENCH0000000000000000000", name=NAME, queue="default", attempt=1, metadata={})
    traced = Task(
        id="task_01JBENCH0000000000000000001",
        name=NAME,
        queue="default",
        attempt=1,
        metadata={"cairnq_django": {"trace": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}},
    )
    owner = AttemptOwner(None, "worker_bench", 30_000)  # type: ignore[arg-type]
    attempts = [Attempt(traced, owner)]
    definition = get_task(NAME)
    assert definition is not None

    def publish() -> None:
        with tracing.publishing("default", NAME) as publication:
            publication.stamp(spec)
            publication.published([row])

    def process() -> None:
        with tracing.processing(definition, attempts):
            pass

    return publish, process


def submit() -> None:
    cq.submit(NAME, {"n": 1})


def set_state(state: str) -> None:
    if state == "absent":
        tracing._modules = False  # what _load records when opentelemetry is missing
    else:
        tracing._modules = None  # loaded again on the next call


def measure(states: list[str], calls: int, rounds: int) -> dict[str, dict[str, float]]:
    publish, process = hooks()
    runs: dict[str, dict[str, list[float]]] = {s: {"publish": [], "process": [], "submit": []} for s in states}
    for _ in range(rounds):
        for state in states:
            set_state(state)
            runs[state]["publish"].append(per_call_us(publish, calls * 10))
            runs[state]["process"].append(per_call_us(process, calls * 10))
            runs[state]["submit"].append(per_call_us(submit, calls))
            Task.objects.all().delete()
    return {s: {k: statistics.median(v) for k, v in figures.items()} for s, figures in runs.items()}


def install_sdk() -> None:
    # Imported here: the absent and api rounds run before the SDK is loaded.
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    Task.objects.all().delete()
    for _ in range(200):  # warm the connection, the statements and the imports
        submit()
    figures = measure(["absent", "api"], args.calls, args.rounds)
    install_sdk()
    figures.update(measure(["sdk"], args.calls, args.rounds))
    base = figures["absent"]
    print(f"per call, µs (median of {args.rounds} rounds; hooks x{args.calls * 10}, submits x{args.calls})")
    print(f"{'':<8}{'publish hook':>14}{'process hook':>14}{'submit':>10}{'submit ratio':>14}{'hooks / submit':>16}")
    for state in ("absent", "api", "sdk"):
        row = figures[state]
        # What the hooks add over ``absent``, as a share of an untraced submit:
        # the end-to-end ratio beside it is within the submit's own noise.
        added = (row["publish"] - base["publish"]) + (row["process"] - base["process"])
        print(
            f"{state:<8}{row['publish']:>14.2f}{row['process']:>14.2f}{row['submit']:>10.1f}"
            f"{row['submit'] / base['submit']:>13.3f}x{added / base['submit']:>15.2%}"
        )

if __name__ == "__main__":
    main()
