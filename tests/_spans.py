"""The OpenTelemetry SDK's in-memory exporter, as this process's tracer provider for one test.

``recorded_spans`` makes an SDK provider exporting to memory the global one
for the test and puts the API's unset state back afterwards, so every other
test runs untraced (its rows' metadata exactly as submitted), as an
application without a provider would. The API sets its global once per
process; the fixture resets it as opentelemetry-test-utils'
``reset_trace_globals`` does. Without the SDK installed a test using the
fixture is skipped; importing this module never is (the interop suite
imports it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

try:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.util._once import Once
except ImportError:  # the test extra without opentelemetry: the fixture skips
    HAVE_SDK = False
else:
    HAVE_SDK = True


def _reset_global_provider() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


class Spans:
    """The spans finished during the test, by kind."""

    def __init__(self, exporter: Any) -> None:
        self.exporter = exporter

    def all(self) -> list[Any]:
        return list(self.exporter.get_finished_spans())

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
    if not HAVE_SDK:
        pytest.skip("opentelemetry-sdk is not installed")
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.fail("a tracer provider is already set; this suite expects none outside recorded_spans")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield Spans(exporter)
    finally:
        _reset_global_provider()
        provider.shutdown()
