"""Pin that failure envelopes stay wire-compatible both ways with the upstream SDK
(``cairnq==0.15.1``): a failure our worker writes, with its traceback in ``details``,
reads in upstream ``get``/``wait``/``TaskFailed`` with the same five members; a failure an upstream
worker writes for a Django task's row reads through ``get_result()`` with an
``exception_class`` that resolves."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("cairnq")
backends = pytest.importorskip("cairnq_django.backends")

import cairnq  # noqa: E402

import cairnq_django as cq  # noqa: E402
from testproject.native import tasks  # noqa: E402
from tests.interop.test_upstream import QUEUE, UpstreamLoop, run_worker, stop_worker, upstream  # noqa: E402,F401
from tests.native.test_backend import run_worker as run_our_worker  # noqa: E402


def test_upstream_reads_our_envelope_with_a_traceback(
    upstream: tuple[UpstreamLoop, Any], subprocess_env: dict[str, str]
) -> None:
    loop, client = upstream
    failed = cq.submit("native.plain.boom", {"message": "read me upstream"}, max_attempts=1)
    run_our_worker(subprocess_env)

    seen = loop.call(lambda: client.get(failed.id))
    assert seen.status == "failed"
    assert set(seen.error) == {"type", "code", "message", "retryable", "details"}
    assert (seen.error["type"], seen.error["code"], seen.error["retryable"]) == ("ValueError", "handler_error", True)
    assert "read me upstream" in seen.error["details"]["traceback"]
    # The upstream reader's own exception unpacks the same envelope.
    raised = cairnq.TaskFailed(loop.call(lambda: client.wait(failed.id, timeout_ms=2_000)).error)
    assert raised.code == "handler_error" and "Traceback" in raised.details["traceback"]


def test_an_upstream_failure_of_a_django_task_reads_as_a_class(upstream: tuple[UpstreamLoop, Any]) -> None:
    loop, client = upstream

    async def lookup_fails(ctx: Any, payload: dict[str, Any]) -> None:
        raise LookupError(f"nothing for {payload['args']}")

    result = tasks.fail_once_only.using(queue_name=QUEUE).enqueue("upstream")  # max_attempts=1
    worker, running = run_worker(loop, client, {tasks.fail_once_only.module_path: lookup_fails})
    try:
        assert cq.wait(result.id, timeout=15, poll_ms=20).status == "failed"
    finally:
        stop_worker(loop, worker, running)
    got = tasks.fail_once_only.get_result(result.id)
    assert got.status == backends.TaskResultStatus.FAILED and got.attempts == 1
    (error,) = got.errors
    assert error.exception_class is LookupError  # upstream writes the class name only
    assert "nothing for" in error.traceback
