"""The PRODUCER span of one submit call, and the trace context it leaves on each task (docs/tracing.md).

One span per call: ``submit`` publishes one task, ``submit_many`` a batch
whose tasks all carry the same context. The span covers the submit gate's
wait and the insert; an exception leaving the call (a full queue, a keyed
``reject``, a bad item of a batch) is recorded on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

from opentelemetry.trace import Span, SpanKind, Tracer

from . import Publication, UNTRACED, propagation
from .tracer import (
    BATCH_COUNT,
    DESTINATION,
    MESSAGE_ID,
    OPERATION,
    OPERATION_NAME,
    OPERATION_TYPE,
    SYSTEM,
    SYSTEM_NAME,
    TASK_NAME,
    current_tracer,
)

if TYPE_CHECKING:
    from ..models import Task
    from ..store.base import SubmitSpec

OPERATION_ATTRIBUTES = {SYSTEM: SYSTEM_NAME, OPERATION: "publish", OPERATION_TYPE: "send", OPERATION_NAME: "publish"}


class SpanPublication(Publication):
    """A submit call's span: it stamps each spec's metadata with the span's context."""

    __slots__ = ("_carrier", "_last", "queue", "span")

    def __init__(self, span: Span, queue: str) -> None:
        self.span = span
        self.queue = queue
        # Empty when the span has no valid context (nothing to continue from).
        self._carrier = propagation.carrier_of(span)
        # The last (metadata in, metadata out): a batch's pairs share one text.
        self._last: tuple[str, str] | None = None

    def stamp(self, spec: SubmitSpec) -> SubmitSpec:
        if not self._carrier:
            return spec
        last = self._last
        if last is not None and last[0] is spec.metadata_json:
            text = last[1]
        else:
            text = propagation.stamped(spec.metadata_json, self._carrier)
            self._last = (spec.metadata_json, text)
        return dataclasses.replace(spec, metadata_json=text)

    def stamp_all(self, specs: Iterable[SubmitSpec]) -> Iterator[SubmitSpec]:
        return map(self.stamp, specs)

    def published(self, rows: Sequence[Task]) -> None:
        """Name what the call wrote: the task id, or the batch's size (and its queue and name if shared)."""
        span = self.span
        if not span.is_recording():
            return
        if len(rows) == 1:
            span.set_attribute(MESSAGE_ID, rows[0].id)
            return
        span.set_attribute(BATCH_COUNT, len(rows))
        queues = {row.queue for row in rows}
        if len(queues) == 1:
            queue = queues.pop()
            span.set_attribute(DESTINATION, queue)
            if queue != self.queue:
                span.update_name(f"publish {queue}")
        names = {row.name for row in rows}
        if len(names) == 1:
            span.set_attribute(TASK_NAME, names.pop())


def publishing(queue: str, name: str | None) -> AbstractContextManager[Publication]:
    """The span of one submit call, current for its duration; ``queue`` is the call's (default) queue."""
    tracer = current_tracer()
    if tracer is None:
        return UNTRACED
    return _span_publishing(tracer, queue, name)


@contextmanager
def _span_publishing(tracer: Tracer, queue: str, name: str | None) -> Iterator[Publication]:
    attributes = dict(OPERATION_ATTRIBUTES)
    if name is not None:
        attributes[DESTINATION] = queue
        attributes[TASK_NAME] = name
    with tracer.start_as_current_span(f"publish {queue}", kind=SpanKind.PRODUCER, attributes=attributes) as span:
        yield SpanPublication(span, queue)
