"""A span's W3C trace context in a task's metadata, and back (docs/tracing.md).

Stored as ``metadata["cairnq_django"]["trace"]``: the ``traceparent`` (and
``tracestate``, when there is one) headers as strings, next to whatever else
the app keeps under its namespace (the limit key). The other cairnq SDKs keep
the metadata column as written and never read this key.

Always W3C Trace Context, whatever propagators the application configured:
the row is read by workers on other hosts and by other SDKs, so its format is
fixed rather than a process setting.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..protocol.limits import METADATA_NAMESPACE
from ..protocol.payload import encode_object

TRACE_KEY = "trace"

_W3C = TraceContextTextMapPropagator()


def carrier_of(span: Span) -> dict[str, str]:
    """The span's context as W3C headers (empty for a span without a valid context)."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span, Context()))
    return carrier


def stamped(metadata_json: str, carrier: Mapping[str, str]) -> str:
    """``metadata_json`` (a JSON object) with ``carrier`` under the app's namespace; other keys kept."""
    if metadata_json == "{}":
        metadata: dict[str, Any] = {}
    else:
        metadata = json.loads(metadata_json)
    own = metadata.get(METADATA_NAMESPACE)
    metadata[METADATA_NAMESPACE] = {**(own if isinstance(own, Mapping) else {}), TRACE_KEY: dict(carrier)}
    return encode_object(metadata, what="metadata")


def stored_context(metadata: Any) -> SpanContext | None:
    """The producer's span context a task row carries, or None (none stored, or not readable).

    The row may come from another SDK, raw SQL or an older version: anything
    but a well-formed carrier is treated as no context, never as an error.
    """
    own = metadata.get(METADATA_NAMESPACE) if isinstance(metadata, Mapping) else None
    carrier = own.get(TRACE_KEY) if isinstance(own, Mapping) else None
    if not isinstance(carrier, Mapping):
        return None
    headers = {key: value for key, value in carrier.items() if isinstance(key, str) and isinstance(value, str)}
    if "traceparent" not in headers:
        return None
    span_context = trace.get_current_span(_W3C.extract(headers, context=Context())).get_span_context()
    return span_context if span_context.is_valid else None
