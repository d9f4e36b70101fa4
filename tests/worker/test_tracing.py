"""Pin OpenTelemetry tracing across a real ``cairnq_worker`` process: the row carries the
submit's W3C context in ``metadata["cairnq_django"]["trace"]`` and still runs; in a worker
whose process has the SDK configured (``_traced_worker.py``), a sync handler's first attempt,
an async handler, and a retry make the spans they do inline -- a child of the test
process's producer span, and a linked new trace for the retry."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

import cairnq_django as cq
from cairnq_django.models import Task
from tests._spans import Spans, recorded_spans  # noqa: F401 - the fixture

from .conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TRACED_WORKER = str(Path(__file__).with_name("_traced_worker.py"))
QUICK_RETRY = {"RETRY_BACKOFF_MS": 10, "RETRY_BACKOFF_MAX_MS": 10}


def _hex(value: int, width: int) -> str:
    return f"0x{value:0{width}x}"


def _spans_by_task(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    found = {}
    for line in path.read_text().splitlines():
        span = json.loads(line)
        attributes = span["attributes"]
        if span["kind"] == "SpanKind.CONSUMER":
            found[(attributes["messaging.message.id"], attributes["cairnq.task.attempt"])] = span
    return found


def test_the_row_keeps_the_context_and_a_plain_worker_runs_it(
    cairnq_db: Any, recorded_spans: Spans, start_worker: Any
) -> None:
    row = cq.submit("demo.noop", {"result": 7}, metadata={"origin": "test"})
    (producer,) = recorded_spans.producers()
    stored = Task.objects.get(id=row.id).metadata
    context = producer.get_span_context()
    assert stored["origin"] == "test"
    assert stored["cairnq_django"]["trace"]["traceparent"].startswith(
        f"00-{context.trace_id:032x}-{context.span_id:016x}-"
    )
    worker = start_worker("--burst")
    assert worker.wait() == 0, worker.output()[-3000:]
    done = cq.get(row.id)
    assert (done.status, done.result) == ("succeeded", 7)
    assert done.metadata == stored


def test_a_traced_worker_continues_the_trace(
    cairnq_db: Any, recorded_spans: Spans, start_worker: Any, tmp_path: Path
) -> None:
    sync = cq.submit("demo.noop", {})
    asynchronous = cq.submit("demo.async_echo", {"n": 1})
    retried = cq.submit("demo.flaky", {"fail_times": 1}, max_attempts=2)
    producers = {span.attributes["messaging.message.id"]: span for span in recorded_spans.producers()}
    span_file = tmp_path / "spans.jsonl"
    worker = start_worker(overrides=QUICK_RETRY, env={"SPAN_FILE": str(span_file)}, script=TRACED_WORKER)
    # Not --burst: the retry is due a moment after the first attempt fails.
    wait_until(
        lambda: all(cq.get(t.id).status == "succeeded" for t in (sync, asynchronous, retried)),
        what="the three tasks to succeed",
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()[-3000:]
    consumers = _spans_by_task(span_file)
    for task in (sync, asynchronous, retried):
        producer = producers[task.id].get_span_context()
        first = consumers[(task.id, 1)]
        assert first["context"]["trace_id"] == _hex(producer.trace_id, 32)
        assert first["parent_id"] == _hex(producer.span_id, 16)
        assert first["attributes"]["cairnq.worker.id"] == cq.get(task.id).worker_id
    assert consumers[(retried.id, 1)]["status"]["status_code"] == "ERROR"
    second = consumers[(retried.id, 2)]
    producer = producers[retried.id].get_span_context()
    assert second["parent_id"] is None and second["context"]["trace_id"] != _hex(producer.trace_id, 32)
    assert [link["context"]["span_id"] for link in second["links"]] == [_hex(producer.span_id, 16)]
    assert second["status"]["status_code"] == "UNSET"


def test_a_child_submitted_by_an_async_handler_stays_in_its_trace(
    cairnq_db: Any, recorded_spans: Spans, start_worker: Any, tmp_path: Path
) -> None:
    # ctx.asubmit writes on the worker's database threads: the handler's
    # context (its consumer span) must travel there with the call.
    parent = cq.submit("demo.async_parent", {})
    span_file = tmp_path / "spans.jsonl"
    worker = start_worker(env={"SPAN_FILE": str(span_file)}, script=TRACED_WORKER)
    wait_until(lambda: cq.get(parent.id).status == "succeeded", what="the parent to succeed")
    child_id = cq.get(parent.id).result
    wait_until(lambda: cq.get(child_id).status == "succeeded", what="the child to succeed")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()[-3000:]
    spans = [json.loads(line) for line in span_file.read_text().splitlines()]
    consumers = _spans_by_task(span_file)
    (child_producer,) = [span for span in spans if span["kind"] == "SpanKind.PRODUCER"]
    parent_consumer, child_consumer = consumers[(parent.id, 1)], consumers[(child_id, 1)]
    trace_id = _hex(recorded_spans.producers()[0].get_span_context().trace_id, 32)
    assert {s["context"]["trace_id"] for s in (parent_consumer, child_producer, child_consumer)} == {trace_id}
    assert child_producer["parent_id"] == parent_consumer["context"]["span_id"]
    assert child_consumer["parent_id"] == child_producer["context"]["span_id"]
    assert child_producer["attributes"]["messaging.message.id"] == child_id
