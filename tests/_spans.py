"""The OpenTelemetry SDK's in-memory exporter behind this process's tracer provider.

OpenTelemetry lets a process set its global provider once, so the first test
that asks installs it and every later one shares it; ``recorded_spans`` clears
what earlier tests left. Until a test asks, no provider is set and the code
under test runs untraced, as an application without the SDK would. Without
the SDK installed, a test using the fixture is skipped; importing this module
never is (the interop suite imports it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

try:
    from opentelemetry import trace
    from opentelemetry.sdk import trace as sdk_trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
except ImportError:  # the test extra without opentelemetry: the fixture skips
    EXPORTER: Any = None
else:
    EXPORTER = InMemorySpanExporter()


def install_provider() -> None:
    """Make an SDK provider exporting to ``EXPORTER`` this process's global one (or join the one set)."""
    current = trace.get_tracer_provider()
    if isinstance(current, sdk_trace.TracerProvider):
        if not getattr(current, "_cairnq_test_exporter", False):
            current.add_span_processor(SimpleSpanProcessor(EXPORTER))
            current._cairnq_test_exporter = True  # type: ignore[attr-defined]
        return
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    provider._cairnq_test_exporter = True  # type: ignore[attr-defined]
    trace.set_tracer_provider(provider)


class Spans:
    """The spans finished since the fixture started, by kind."""

    def all(self) -> list[Any]:
        return list(EXPORTER.get_finished_spans())

    def of_kind(self, kind: str) -> list[Any]:
        wanted = getattr(trace.SpanKind, kind.upper())
        return [span for span in self.all() if span.kind == wanted]

    def producers(self) -> list[Any]:
        return self.of_kind("producer")

    def consumers(self) -> list[Any]:
        return self.of_kind("consumer")

    def tracer(self) -> Any:
        return trace.get_tracer("tests")


@pytest.fixture
def recorded_spans() -> Iterator[Spans]:
    if EXPORTER is None:
        pytest.skip("opentelemetry-sdk is not installed")
    install_provider()
    EXPORTER.clear()
    yield Spans()
    EXPORTER.clear()
