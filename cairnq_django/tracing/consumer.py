"""The CONSUMER span of one handler call, current while the handler runs (docs/tracing.md).

Which trace it belongs to depends on the call:

* a task's first attempt continues the producer's trace: its span is a child
  of the submit's span;
* a later attempt (a retry) starts a trace of its own with a link to the
  producer's span, so one trace does not grow with every retry and its
  duration stays the first attempt's;
* a batch call is one span linking to every task's producer span;
* a row without a readable context (submitted by another SDK, raw SQL, or
  before tracing was on) gets a root span.

An exception out of the handler is recorded and sets the status to ERROR,
as does a task the handler fails itself (``ctx.fail``); ``Snooze`` is not a
failure and leaves the status unset.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanKind, Status, StatusCode, Tracer

from ..exceptions import Snooze
from . import NO_SPAN, propagation
from .tracer import (
    ATTEMPT,
    BATCH_COUNT,
    CONVERSATION_ID,
    DESTINATION,
    MESSAGE_ID,
    OPERATION,
    OPERATION_NAME,
    OPERATION_TYPE,
    SYSTEM,
    SYSTEM_NAME,
    TASK_NAME,
    WORKER_ID,
    current_tracer,
)

if TYPE_CHECKING:
    from ..tasks.registry import TaskDefinition
    from ..worker.attempt import Attempt

OPERATION_ATTRIBUTES = {SYSTEM: SYSTEM_NAME, OPERATION: "process", OPERATION_TYPE: "process", OPERATION_NAME: "process"}

# The span of the handler call running in this context: ``failed`` marks it,
# not whatever span the handler itself may have made current.
_call_span_var: ContextVar[Span | None] = ContextVar("cairnq_call_span", default=None)


def processing(definition: TaskDefinition, attempts: Sequence[Attempt]) -> AbstractContextManager[Any]:
    """The span of one handler call over ``attempts`` (one task, or a batch of one name)."""
    tracer = current_tracer()
    if tracer is None or not attempts:
        return NO_SPAN
    return _span_processing(tracer, definition, attempts)


def _call_span(definition: TaskDefinition, attempts: Sequence[Attempt]) -> tuple[Context, list[Link], dict[str, Any]]:
    """The parent context, links and attributes of one call's span."""
    first = attempts[0].task
    attributes: dict[str, Any] = dict(OPERATION_ATTRIBUTES)
    attributes[TASK_NAME] = first.name
    attributes[WORKER_ID] = attempts[0].owner.worker_id
    if definition.batch is not None:
        attributes[BATCH_COUNT] = len(attempts)
        if all(attempt.task.queue == first.queue for attempt in attempts):
            attributes[DESTINATION] = first.queue
        links = []
        for attempt in attempts:
            task = attempt.task
            stored = propagation.stored_context(task.metadata)
            if stored is not None:
                links.append(Link(stored, {MESSAGE_ID: task.id, ATTEMPT: task.attempt}))
        return Context(), links, attributes
    attributes[DESTINATION] = first.queue
    attributes[MESSAGE_ID] = first.id
    attributes[ATTEMPT] = first.attempt
    if first.correlation_id is not None:
        attributes[CONVERSATION_ID] = first.correlation_id
    stored = propagation.stored_context(first.metadata)
    if stored is None:
        return Context(), [], attributes
    if first.attempt <= 1:
        return trace.set_span_in_context(NonRecordingSpan(stored), Context()), [], attributes
    return Context(), [Link(stored)], attributes


@contextmanager
def _span_processing(tracer: Tracer, definition: TaskDefinition, attempts: Sequence[Attempt]) -> Iterator[Any]:
    parent, links, attributes = _call_span(definition, attempts)
    name = f"process {attributes.get(DESTINATION, attempts[0].task.queue)}"
    with tracer.start_as_current_span(
        name,
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        token = _call_span_var.set(span)
        try:
            yield span
        except Snooze:
            span.add_event("snoozed")
            raise
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            _call_span_var.reset(token)


def failed(task_id: str, envelope: Mapping[str, Any]) -> None:
    """Record on the running call's span that its handler failed ``task_id`` (an event, status ERROR)."""
    span = _call_span_var.get()
    if span is None or not span.is_recording():
        return
    kind, message = envelope.get("type"), envelope.get("message")
    span.add_event("cairnq.task.failed", {MESSAGE_ID: task_id, "error.type": str(kind), "cairnq.error.message": str(message)})
    span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}"))
