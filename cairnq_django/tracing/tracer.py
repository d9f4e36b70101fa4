"""The tracer every cairnq span comes from, and the attribute names they share (docs/tracing.md).

The names are OpenTelemetry's messaging semantic conventions; ``cairnq.*``
holds what those conventions have no name for.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, Tracer, TracerProvider

SCOPE = "cairnq_django"

SYSTEM = "messaging.system"
DESTINATION = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
CONVERSATION_ID = "messaging.message.conversation_id"
BATCH_COUNT = "messaging.batch.message_count"
# ``messaging.operation`` is the conventions' older name (publish / process);
# ``.type`` and ``.name`` are the current ones. All three are set, so a backend
# reading either generation groups the spans.
OPERATION = "messaging.operation"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
TASK_NAME = "cairnq.task.name"
ATTEMPT = "cairnq.task.attempt"
WORKER_ID = "cairnq.worker.id"

SYSTEM_NAME = "cairnq"

_cached: tuple[TracerProvider, Tracer] | None = None


def current_tracer() -> Tracer | None:
    """The tracer of the configured provider; None while none is (the API alone, or a no-op one).

    Asked on every call, not once: an application may configure its provider
    after the first submit. Without one no span would be recorded anyway, and
    returning early keeps the API-only cost to this check.
    """
    global _cached
    provider = trace.get_tracer_provider()
    if isinstance(provider, (ProxyTracerProvider, NoOpTracerProvider)):
        return None
    cached = _cached
    if cached is None or cached[0] is not provider:
        cached = _cached = (provider, provider.get_tracer(SCOPE))
    return cached[1]
