"""Pin the OpenTelemetry spans of submits and attempts, read from the SDK's in-memory exporter.

A submit is a PRODUCER span whose W3C context the row keeps under
``metadata["cairnq_django"]["trace"]`` next to the caller's metadata; an
attempt runs in a CONSUMER span, a child of the producer's on attempt 1 and a
new trace linked to it on a retry; a batch call is one span linking every
task; a handler's exception, or a task it fails itself, is recorded with
status ERROR (a snooze is not an error); rows without a
readable context run under a root span. The attempts run inline
(``run_until_idle``, the worker's own pipeline) so the spans are this process's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

import cairnq_django as cq
from cairnq_django.exceptions import Snooze
from cairnq_django.models import Task
from cairnq_django.tasks import registry
from cairnq_django.testing import run_until_idle
from tests._spans import Spans, recorded_spans  # noqa: F401 - the fixture
from tests.conftest import clear_queue

trace = pytest.importorskip("opentelemetry.trace")
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

PREFIX = "tests.tracing."


def _add(ctx: Any, payload: dict[str, Any]) -> int:
    return payload["a"] + payload["b"]


def _flaky(ctx: Any, payload: dict[str, Any]) -> str:
    if ctx.attempt < 2:
        raise RuntimeError(f"attempt {ctx.attempt} fails")
    return "ok"


def _batch(ctxs: list[Any]) -> dict[str, Any]:
    return {ctx.task_id: len(ctxs) for ctx in ctxs}


def _child(ctx: Any, payload: dict[str, Any]) -> str:
    return ctx.submit(PREFIX + "add", {"a": 1, "b": 2}).id


_SNOOZED: set[str] = set()


def _snooze_once(ctx: Any, payload: dict[str, Any]) -> str:
    if ctx.task_id not in _SNOOZED:
        _SNOOZED.add(ctx.task_id)
        raise Snooze(delay_ms=0)
    return "done"


def _fails_itself(ctx: Any, payload: dict[str, Any]) -> str:
    with trace.get_tracer("tests.handler").start_as_current_span("handler's own span"):
        ctx.fail("not today", retryable=False)
    return "returned after failing"


async def _async_add(ctx: Any, payload: dict[str, Any]) -> int:
    await asyncio.sleep(0)
    return payload["a"] + payload["b"]


HANDLERS = {
    "add": (_add, {}),
    "flaky": (_flaky, {}),
    "batch": (_batch, {"batch": 10}),
    "child": (_child, {}),
    "snooze_once": (_snooze_once, {}),
    "async_add": (_async_add, {}),
    "fails_itself": (_fails_itself, {}),
}


@pytest.fixture(scope="module", autouse=True)
def handlers() -> Iterator[None]:
    for name, (func, options) in HANDLERS.items():
        registry.task(PREFIX + name, **options)(func)
    yield
    for name in HANDLERS:
        registry.unregister(PREFIX + name)


@pytest.fixture
def queue_in_test_transaction(db: Any) -> None:
    assert connection.in_atomic_block
    clear_queue()


def _traceparent(span: Any) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _stored(task_id: str) -> dict[str, Any]:
    return Task.objects.get(id=task_id).metadata


def test_submit_is_a_producer_span_whose_context_the_row_keeps(
    queue_in_test_transaction: None, recorded_spans: Spans
) -> None:
    metadata = {"mine": [1, 2], "cairnq_django": {"kept": "yes"}}
    row = cq.submit(PREFIX + "add", {"a": 1, "b": 2}, queue="maths", metadata=metadata, correlation_id="c-1")
    (span,) = recorded_spans.producers()
    assert span.name == "publish maths" and span.kind == SpanKind.PRODUCER
    assert dict(span.attributes) == {
        "messaging.system": "cairnq",
        "messaging.operation": "publish",
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.destination.name": "maths",
        "messaging.message.id": row.id,
        "cairnq.task.name": PREFIX + "add",
    }
    assert span.status.status_code == StatusCode.UNSET
    stored = _stored(row.id)
    # The caller's metadata is untouched; the context sits beside it in the app's namespace.
    assert stored["mine"] == [1, 2] and stored["cairnq_django"]["kept"] == "yes"
    assert stored["cairnq_django"]["trace"] == {"traceparent": _traceparent(span)}
    assert metadata == {"mine": [1, 2], "cairnq_django": {"kept": "yes"}}


def test_first_attempt_is_a_child_of_the_producer_span(queue_in_test_transaction: None, recorded_spans: Spans) -> None:
    row = cq.submit(PREFIX + "add", {"a": 1, "b": 2}, correlation_id="conv-9")
    run_until_idle()
    assert cq.get(row.id).status == "succeeded"
    (producer,) = recorded_spans.producers()
    (consumer,) = recorded_spans.consumers()
    assert consumer.name == "process default" and consumer.kind == SpanKind.CONSUMER
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
    assert consumer.parent.is_remote and not consumer.links
    assert dict(consumer.attributes) == {
        "messaging.system": "cairnq",
        "messaging.operation": "process",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": row.id,
        "messaging.message.conversation_id": "conv-9",
        "cairnq.task.name": PREFIX + "add",
        "cairnq.task.attempt": 1,
        "cairnq.worker.id": "worker_inline",
    }
    assert consumer.status.status_code == StatusCode.UNSET


def test_a_retry_is_a_new_trace_linked_to_the_producer(queue_in_test_transaction: None, recorded_spans: Spans) -> None:
    row = cq.submit(PREFIX + "flaky", {}, max_attempts=2)
    run_until_idle()
    assert (cq.get(row.id).status, cq.get(row.id).attempt) == ("succeeded", 2)
    (producer,) = recorded_spans.producers()
    first, second = recorded_spans.consumers()
    assert (first.attributes["cairnq.task.attempt"], second.attributes["cairnq.task.attempt"]) == (1, 2)
    assert first.parent.span_id == producer.context.span_id
    # The failed first attempt: the exception recorded, status ERROR.
    assert first.status.status_code == StatusCode.ERROR
    assert first.status.description == "RuntimeError: attempt 1 fails"
    (event,) = first.events
    assert event.name == "exception" and event.attributes["exception.type"] == "RuntimeError"
    assert event.attributes["exception.message"] == "attempt 1 fails"
    # The retry: no parent, a trace of its own, one link to the producer's span.
    assert second.parent is None and second.context.trace_id != producer.context.trace_id
    (link,) = second.links
    assert (link.context.trace_id, link.context.span_id) == (producer.context.trace_id, producer.context.span_id)
    assert second.status.status_code == StatusCode.UNSET


def test_a_batch_call_is_one_span_linking_every_task(queue_in_test_transaction: None, recorded_spans: Spans) -> None:
    together = cq.submit_many([(PREFIX + "batch", {"i": 0}), (PREFIX + "batch", {"i": 1})], queue="bulk")
    alone = cq.submit(PREFIX + "batch", {"i": 2}, queue="bulk")
    run_until_idle()
    assert [cq.get(t.id).result for t in [*together, alone]] == [3, 3, 3]
    many, single = recorded_spans.producers()
    # submit_many: one span for the call; every row carries its context.
    assert many.attributes["messaging.batch.message_count"] == 2
    assert many.attributes["messaging.destination.name"] == "bulk"
    assert many.attributes["cairnq.task.name"] == PREFIX + "batch"
    assert "messaging.message.id" not in many.attributes
    assert {_stored(t.id)["cairnq_django"]["trace"]["traceparent"] for t in together} == {_traceparent(many)}
    (consumer,) = recorded_spans.consumers()
    assert consumer.parent is None
    assert consumer.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in consumer.attributes
    linked = {(link.context.span_id, link.attributes["messaging.message.id"]) for link in consumer.links}
    assert linked == {
        (many.context.span_id, together[0].id),
        (many.context.span_id, together[1].id),
        (single.context.span_id, alone.id),
    }
    assert all(link.attributes["cairnq.task.attempt"] == 1 for link in consumer.links)


def test_limit_keys_and_the_trace_share_the_namespace(queue_in_test_transaction: None, recorded_spans: Spans) -> None:
    # demo.fleet.sync stores its limit key under metadata["cairnq_django"] too.
    row = cq.submit("demo.fleet.sync", {"customer": "acme"}, metadata={"cairnq_django": {"kept": 1}})
    (many,) = cq.submit_many([("demo.fleet.sync", {"customer": "bolt"})])
    (span_one, span_many) = recorded_spans.producers()
    assert _stored(row.id)["cairnq_django"] == {"kept": 1, "limit_key": "acme", "trace": {"traceparent": _traceparent(span_one)}}
    assert _stored(many.id)["cairnq_django"] == {"limit_key": "bolt", "trace": {"traceparent": _traceparent(span_many)}}


def test_a_task_submitted_by_a_handler_continues_the_trace(
    queue_in_test_transaction: None, recorded_spans: Spans
) -> None:
    parent = cq.submit(PREFIX + "child", {})
    run_until_idle()
    child_id = cq.get(parent.id).result
    first_producer, child_producer = recorded_spans.producers()
    parent_consumer, child_consumer = recorded_spans.consumers()
    trace_id = first_producer.context.trace_id
    assert {s.context.trace_id for s in (child_producer, parent_consumer, child_consumer)} == {trace_id}
    assert child_producer.parent.span_id == parent_consumer.context.span_id
    assert child_consumer.parent.span_id == child_producer.context.span_id
    assert child_consumer.attributes["messaging.message.id"] == child_id


def test_submit_inside_the_callers_transaction_and_span(db: Any, recorded_spans: Spans) -> None:
    clear_queue()
    with recorded_spans.tracer().start_as_current_span("request") as request:
        with transaction.atomic():
            row = cq.submit(PREFIX + "add", {"a": 2, "b": 2})
            # Stored with the row inside the caller's transaction.
            assert "trace" in _stored(row.id)["cairnq_django"]
    (producer,) = recorded_spans.producers()
    assert producer.parent.span_id == request.get_span_context().span_id
    assert producer.context.trace_id == request.get_span_context().trace_id
    run_until_idle()
    (consumer,) = recorded_spans.consumers()
    assert consumer.context.trace_id == request.get_span_context().trace_id


def test_a_rolled_back_submit_leaves_its_span_and_no_row(db: Any, recorded_spans: Spans) -> None:
    clear_queue()
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            cq.submit(PREFIX + "add", {"a": 2, "b": 2})
            raise RuntimeError("rolled back")
    assert not Task.objects.exists()
    assert len(recorded_spans.producers()) == 1


def test_a_refused_submit_records_the_error(queue_in_test_transaction: None, recorded_spans: Spans) -> None:
    cq.submit(PREFIX + "add", {"a": 1, "b": 1}, key="K-1")
    with pytest.raises(cq.AlreadyExists):
        cq.submit(PREFIX + "add", {"a": 1, "b": 1}, key="K-1", conflict="reject")
    ok, refused = recorded_spans.producers()
    assert ok.status.status_code == StatusCode.UNSET
    assert refused.status.status_code == StatusCode.ERROR
    assert [event.name for event in refused.events] == ["exception"]


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {"cairnq_django": "not an object"},
        {"cairnq_django": {"trace": {"traceparent": "00-garbage"}}},
        {"cairnq_django": {"trace": {"traceparent": 42}}},
        {"cairnq_django": {"trace": ["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]}},
    ],
    ids=["none", "namespace-not-object", "malformed", "not-text", "not-a-carrier"],
)
def test_rows_without_a_readable_context_run_under_a_root_span(
    queue_in_test_transaction: None, recorded_spans: Spans, metadata: dict[str, Any]
) -> None:
    # Written as another SDK or raw SQL would: the metadata as given, no producer span.
    row = cq.submit(PREFIX + "add", {"a": 1, "b": 1})
    Task.objects.filter(id=row.id).update(metadata=metadata)
    recorded_spans_before = len(recorded_spans.all())
    run_until_idle()
    assert cq.get(row.id).status == "succeeded" and cq.get(row.id).result == 2
    (consumer,) = recorded_spans.consumers()
    assert consumer.parent is None and not consumer.links
    assert consumer.attributes["messaging.message.id"] == row.id
    assert len(recorded_spans.all()) == recorded_spans_before + 1


def test_a_snooze_is_not_an_error(queue_in_test_transaction: None, recorded_spans: Spans) -> None:
    row = cq.submit(PREFIX + "snooze_once", {})
    run_until_idle()
    assert cq.get(row.id).status == "succeeded"
    snoozed, finished = recorded_spans.consumers()
    assert snoozed.status.status_code == StatusCode.UNSET
    assert [event.name for event in snoozed.events] == ["snoozed"]
    # The same attempt again (a snooze does not count one): still the producer's child.
    assert finished.attributes["cairnq.task.attempt"] == 1
    assert finished.parent.span_id == snoozed.parent.span_id


def test_async_submit_and_async_handler(queue_in_test_transaction: None, recorded_spans: Spans) -> None:
    from asgiref.sync import async_to_sync

    row = async_to_sync(cq.asubmit)(PREFIX + "async_add", {"a": 3, "b": 4})
    rows = async_to_sync(cq.asubmit_many)([(PREFIX + "async_add", {"a": 1, "b": 1})] * 2)
    run_until_idle()
    assert [cq.get(t.id).result for t in [row, *rows]] == [7, 2, 2]
    one, many = recorded_spans.producers()
    assert one.attributes["messaging.message.id"] == row.id
    assert many.attributes["messaging.batch.message_count"] == 2
    consumers = recorded_spans.consumers()
    assert [span.parent.span_id for span in consumers] == [one.context.span_id, many.context.span_id, many.context.span_id]


def test_a_sampled_out_submit_still_stores_its_context(queue_in_test_transaction: None, recorded_spans: Spans) -> None:
    # A parent that is not sampled: the submit's span is not recorded, but its
    # context (flags 00) is stored, so the attempt follows the same decision.
    parent = trace.NonRecordingSpan(
        trace.SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True)
    )
    with trace.use_span(parent):
        row = cq.submit(PREFIX + "add", {"a": 1, "b": 1})
    stored = _stored(row.id)["cairnq_django"]["trace"]["traceparent"]
    assert stored.startswith("00-0af7651916cd43dd8448eb211c80319c-") and stored.endswith("-00")
    run_until_idle()
    assert cq.get(row.id).status == "succeeded"
    assert recorded_spans.all() == []


def test_with_the_api_but_no_provider_rows_are_written_as_before(queue_in_test_transaction: None) -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    row = cq.submit(PREFIX + "add", {"a": 1, "b": 1}, metadata={"origin": "plain"})
    (many,) = cq.submit_many([(PREFIX + "add", {"a": 2, "b": 2})])
    run_until_idle()
    assert [(cq.get(t.id).status, cq.get(t.id).metadata) for t in (row, many)] == [
        ("succeeded", {"origin": "plain"}),
        ("succeeded", {}),
    ]


def test_a_task_the_handler_fails_itself_marks_the_call_span(
    queue_in_test_transaction: None, recorded_spans: Spans
) -> None:
    row = cq.submit(PREFIX + "fails_itself", {})
    run_until_idle()
    assert cq.get(row.id).status == "failed"
    (consumer,) = recorded_spans.consumers()
    (own,) = [span for span in recorded_spans.all() if span.name == "handler's own span"]
    # The call's span, not the one the handler made current when it failed.
    assert own.status.status_code == StatusCode.UNSET and own.parent.span_id == consumer.context.span_id
    assert consumer.status.status_code == StatusCode.ERROR
    assert consumer.status.description == "TaskError: not today"
    (event,) = consumer.events
    assert event.name == "cairnq.task.failed" and event.attributes["messaging.message.id"] == row.id
