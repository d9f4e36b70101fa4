"""Pin the ``django.tasks`` result contract of ``CairnqBackend`` against real workers:
``errors[i].exception_class`` resolves to a class for every failure a row can hold
(``SystemExit``, ``KeyboardInterrupt``, a ``TaskError`` with a custom type, arguments
that do not fit, a class no import reaches, ``handler_timeout``, ``no_handler``,
``lease_expired``, envelopes the upstream SDKs write); handler failures keep a bounded
traceback in the envelope's ``details`` (Django tasks and plain handlers, sync, async
and batch) while the envelope keeps exactly its five members; ``get_result().task``
is the task as enqueued (queue, priority, run_after, backend from the row, also in a
process that never saw the variant); ``attempts`` counts the attempts that ran, a
pending retry included."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from typing import Any

import pytest
from django.utils import timezone

backends = pytest.importorskip("cairnq_django.backends")

import cairnq_django as cq
from cairnq_django.tasks import registry
from cairnq_django.exceptions import TaskError as CairnqTaskError
from cairnq_django.exceptions import TaskFailed
from cairnq_django.testing import WORKER_ID, run_task
from cairnq_django.protocol.envelopes import MAX_TRACEBACK_BYTES
from testproject.native import tasks
from tests.native.test_backend import REPO, run_worker

Status = backends.TaskResultStatus
ENVELOPE_MEMBERS = {"type", "code", "message", "retryable", "details"}


def failed_error(task: Any, result_id: str) -> Any:
    result = task.get_result(result_id)
    assert result.status == Status.FAILED, (result_id, cq.get(result_id).status)
    (error,) = result.errors
    return error


def test_every_worker_failure_reads_as_an_exception_class(
    cairnq_db: Any, subprocess_env: dict[str, str]
) -> None:
    exited = tasks.exit_now.enqueue(3)
    interrupted = tasks.interrupt.enqueue()
    declined = tasks.decline.enqueue("no funds")
    unreachable = tasks.local_failure.enqueue()
    bad_arguments = tasks.add.enqueue(1)  # add(a, b): b is missing
    async_failed = tasks.async_boom.enqueue("async kaput")
    timed_out = tasks.sleepy.enqueue(5)
    later = tasks.add.enqueue(2, 2)  # the worker must still be running after all of them
    output = run_worker(subprocess_env, "--max-run-ms", "1500", "--concurrency", "4")

    assert tasks.add.get_result(later.id).return_value == 4, output[-3000:]
    expected = {
        exited.id: (tasks.exit_now, SystemExit, "SystemExit: 3"),
        interrupted.id: (tasks.interrupt, KeyboardInterrupt, "KeyboardInterrupt"),
        declined.id: (tasks.decline, CairnqTaskError, "TaskError: no funds"),
        unreachable.id: (tasks.local_failure, TaskFailed, "OnlyHere: defined in a function"),
        bad_arguments.id: (tasks.add, TypeError, "missing a required argument: 'b'"),
        async_failed.id: (tasks.async_boom, ValueError, "ValueError: async kaput"),
    }
    for result_id, (task, exception_class, text) in expected.items():
        error = failed_error(task, result_id)
        assert error.exception_class is exception_class, (result_id, error.exception_class_path)
        assert text in error.traceback and error.traceback.startswith("Traceback"), error.traceback
        row = cq.get(result_id)
        assert set(row.error) == ENVELOPE_MEMBERS
        assert row.error["details"]["traceback"] == error.traceback
    assert cq.get(declined.id).error["type"] == "PaymentDeclined"
    assert cq.get(bad_arguments.id).error["code"] == "bad_arguments"
    # the traceback shows the task's own frame, not just the wrapper's
    assert "async_boom" in failed_error(tasks.async_boom, async_failed.id).traceback

    timeout = failed_error(tasks.sleepy, timed_out.id)
    assert timeout.exception_class is TaskFailed
    assert cq.get(timed_out.id).error["code"] == "handler_timeout"
    assert "HandlerTimeout" in timeout.traceback


def test_plain_handler_failures_keep_their_traceback(cairnq_db: Any, subprocess_env: dict[str, str]) -> None:
    sync = cq.submit("native.plain.boom", {"message": "plain kaput"}, max_attempts=1)
    exited = cq.submit("native.plain.exit", {"code": 4}, max_attempts=1)
    asynchronous = cq.submit("native.plain.async_boom", {"message": "async plain"}, max_attempts=1)
    batch = [cq.submit("native.plain.batch_boom", {"i": i}, max_attempts=1) for i in range(3)]
    declined = cq.submit("native.plain.decline", {}, max_attempts=1)
    run_worker(subprocess_env)

    def details(task: Any) -> dict[str, Any]:
        row = cq.get(task.id)
        assert row.status == "failed" and set(row.error) == ENVELOPE_MEMBERS, row.error
        return row.error["details"]

    found = details(sync)
    assert found["exception_class_path"] == "builtins.ValueError"
    assert 'raise ValueError(payload["message"])' in found["traceback"]
    assert found["traceback"].rstrip().endswith("ValueError: plain kaput")
    assert details(exited)["exception_class_path"] == "builtins.SystemExit"
    assert "KeyError: 'async plain'" in details(asynchronous)["traceback"]
    for task in batch:
        assert "RuntimeError: batch of" in details(task)["traceback"]
    # A TaskError's own details stay; the traceback is added beside them.
    found = details(declined)
    assert found["card"] == "visa" and "card declined" in found["traceback"]
    assert found["exception_class_path"] == "cairnq_django.exceptions.TaskError"
    assert cq.get(declined.id).error["type"] == "PaymentDeclined"


def test_a_long_traceback_is_bounded(cairnq_db: Any, subprocess_env: dict[str, str]) -> None:
    failed = tasks.verbose_failure.enqueue(50_000)
    run_worker(subprocess_env)
    text = failed_error(tasks.verbose_failure, failed.id).traceback
    assert len(text.encode("utf-8")) <= MAX_TRACEBACK_BYTES
    # the start (outer frames, the task's frame) and the end (the exception line) survive
    assert text.startswith("Traceback (most recent call last):")
    assert "verbose_failure" in text and "bytes of traceback cut" in text
    assert text.rstrip().endswith("x" * 1000)


def test_failures_without_a_python_class(cairnq_db: Any, store: Any) -> None:
    """Envelopes written by the worker's own decisions, by recovery and by other SDKs."""
    name = tasks.add.module_path

    def failed_with(envelope: dict[str, Any]) -> Any:
        result = tasks.add.enqueue(1, 1)
        (row,) = store.claim(["default"], "worker_probe", lease_ms=60_000, names=[name])
        store.fail(row.id, "worker_probe", envelope, retryable=False)
        return failed_error(tasks.add, result.id)

    def envelope(type: str, code: str = "handler_error", details: Any = None) -> dict[str, Any]:
        return {"type": type, "code": code, "message": "m", "retryable": False, "details": details or {}}

    # An upstream Python SDK worker: the class name only.
    assert failed_with(envelope("LookupError")).exception_class is LookupError
    # An upstream TypeScript worker: err.name, "Error" by default.
    assert failed_with(envelope("Error")).exception_class is TaskFailed
    assert failed_with(envelope("TypeError")).exception_class is TypeError
    # ctx.fail("reason") and an older row's SystemExit (no details).
    assert failed_with(envelope("TaskError", "task_error")).exception_class is CairnqTaskError
    assert failed_with(envelope("SystemExit")).exception_class is SystemExit
    # Recorded paths that do not import here, or are not exception classes.
    for path in ("nowhere.at.All", "os.path.join", "builtins.object", 42, "no dots", "a..b"):
        error = failed_with(envelope("Custom", details={"exception_class_path": path}))
        assert error.exception_class is TaskFailed, path
    assert failed_with(envelope("Odd", details=["not", "an", "object"])).exception_class is TaskFailed
    assert failed_with(envelope("__import__('os')")).exception_class is TaskFailed
    text = failed_with(envelope("Error")).traceback
    assert text == "Error: m"

    # no_handler, written by the same code path the worker uses.
    result = tasks.add.enqueue(2, 3)
    rows = store.claim(["default"], WORKER_ID, lease_ms=60_000, names=[name])
    registry.unregister(name)
    try:
        (settled,) = run_task(store, rows)
    finally:
        tasks.add.using(priority=0)  # validating re-registers the handler
    assert settled.error["code"] == "no_handler"
    assert failed_error(tasks.add, result.id).exception_class is TaskFailed

    # lease_expired, written by lease recovery.
    result = tasks.fail_once_only.enqueue("never runs")
    (row,) = store.claim(["default"], "worker_gone", lease_ms=1, names=[tasks.fail_once_only.module_path])
    time.sleep(0.05)
    assert store.recover_leases() >= 1
    assert cq.get(result.id).error["code"] == "lease_expired"
    assert failed_error(tasks.fail_once_only, result.id).exception_class is TaskFailed


def test_get_result_describes_the_enqueued_task(cairnq_db: Any, subprocess_env: dict[str, str]) -> None:
    run_after = (timezone.now() + dt.timedelta(hours=2)).replace(microsecond=123456)
    variant = tasks.add.using(priority=5, queue_name="q2", run_after=run_after)
    special = variant.enqueue(1, 2)
    plain = tasks.add.enqueue(3, 4)
    tasks.add.using(priority=-3, queue_name="q3")  # the variant validated last in this process

    got = tasks.add.get_result(special.id).task
    assert (got.priority, got.queue_name, got.run_after, got.backend) == (5, "q2", run_after, "default")
    got = tasks.add.get_result(plain.id).task
    assert (got.priority, got.queue_name, got.run_after, got.backend) == (0, "default", None, "default")

    # A process that never saw the variant reads the same description.
    script = (
        "import json; from testproject.native import tasks; "
        f"t = tasks.add.get_result({special.id!r}).task; "
        "print(json.dumps([t.priority, t.queue_name, t.run_after.isoformat(), t.backend]))"
    )
    proc = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=REPO,
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    priority, queue, when, backend = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (priority, queue, dt.datetime.fromisoformat(when), backend) == (5, "q2", run_after, "default")


def test_attempts_count_while_a_retry_is_pending(cairnq_db: Any, subprocess_env: dict[str, str]) -> None:
    # A long backoff keeps the retry pending after the first attempt fails.
    failing = tasks.boom.enqueue("first of three")
    assert tasks.boom.get_result(failing.id).attempts == 0
    run_worker(subprocess_env, "--retry-backoff-ms", "3600000")
    row = cq.get(failing.id)
    assert (row.status, row.attempt, row.worker_id) == ("queued", 1, None)
    result = tasks.boom.get_result(failing.id)
    assert result.status == Status.READY
    assert result.attempts == 1 and len(result.worker_ids) == 1
    assert result.errors[0].exception_class is ValueError  # the failed attempt's error


def test_a_traceback_is_storable_text_on_both_dialects(cairnq_db: Any, store: Any) -> None:
    from cairnq_django.protocol.envelopes import raised_envelope

    try:
        raise ValueError("nul \x00 and a lone surrogate \udc80 in one message")
    except ValueError as exc:
        envelope, retryable = raised_envelope(exc)
    text = envelope["details"]["traceback"]
    assert "\x00" not in text and "\\x00" in text
    text.encode("utf-8")  # no lone surrogate left
    # stored as it is, details and all, on this dialect
    result = tasks.add.enqueue(1, 1)
    (row,) = store.claim(["default"], "worker_probe", lease_ms=60_000, names=[tasks.add.module_path])
    envelope["message"] = "replaced"  # the message's own rules are not this test's
    store.fail(row.id, "worker_probe", envelope, retryable=False)
    assert cq.get(result.id).error["details"]["traceback"] == text
    assert retryable is True
