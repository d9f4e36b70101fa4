"""Pin ``cairnq_django.testing.run_until_idle``: queued tasks must run inline through
their real handlers on the test's own connection -- inside a test transaction (a
pytest-django ``db`` test, where no worker could see the rows) as well as in a
transactional test -- following the worker's settlement rules (return value stored,
retryable failures retried until attempts run out, ``TaskError`` honoured, batches,
async handlers), running children submitted on other queues, leaving delayed and
unhandled tasks queued, and refusing to spin forever (``NotIdle``). ``SystemExit`` and
``KeyboardInterrupt`` from a handler fail its task with the envelope the worker writes
(class path and traceback in ``details``) and never escape into the test -- except a
Django ``@task``'s ``KeyboardInterrupt``, which Django's contract lets through
(tests/native/test_django_interrupts.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection

import cairnq_django as cq
from cairnq_django.tasks import registry
from cairnq_django import signals
from cairnq_django.exceptions import TaskError
from cairnq_django.testing import NotIdle, run_until_idle
from tests.conftest import clear_queue

PREFIX = "tests.native.inline."


def _add(ctx: Any, payload: dict[str, Any]) -> int:
    return payload["a"] + payload["b"]


def _parent(ctx: Any, payload: dict[str, Any]) -> str:
    child = ctx.submit(PREFIX + "add", {"a": payload["n"], "b": 1}, queue="children")
    return child.id


def _flaky(ctx: Any, payload: dict[str, Any]) -> str:
    if ctx.attempt < payload["succeed_on"]:
        raise RuntimeError(f"attempt {ctx.attempt} fails")
    return f"ok on {ctx.attempt}"


def _refuse(ctx: Any) -> None:
    raise TaskError("bad input", code="bad_input")


def _make_user(ctx: Any, payload: dict[str, Any]) -> int:
    return User.objects.create(username=payload["username"]).pk


def _batch(ctxs: list[Any]) -> dict[str, Any]:
    ctxs[0].succeed({"settled": "by handler"})
    return {ctx.task_id: {"size": len(ctxs)} for ctx in ctxs}


async def _async_progress(ctx: Any, payload: dict[str, Any]) -> str:
    await ctx.aprogress(0.5, "half way")
    return "async done"


async def _async_batch(ctxs: list[Any]) -> dict[str, Any]:
    # Reads each payload inside the event loop: a large one was left in the
    # database by the claim, so it must already be loaded by now.
    return {ctx.task_id: len(ctx.payload["blob"]) for ctx in ctxs}


def _forever(ctx: Any) -> None:
    ctx.submit(PREFIX + "forever", {})


def _exit(ctx: Any) -> None:
    raise SystemExit(2)


def _interrupt(ctx: Any) -> None:
    raise KeyboardInterrupt


async def _async_exit(ctx: Any) -> None:
    raise SystemExit("async exit")


async def _async_interrupt(ctx: Any) -> None:
    raise KeyboardInterrupt


HANDLERS = {
    "add": (_add, {}),
    "parent": (_parent, {}),
    "flaky": (_flaky, {}),
    "refuse": (_refuse, {}),
    "make_user": (_make_user, {}),
    "batch": (_batch, {"batch": 10}),
    "async_progress": (_async_progress, {}),
    "async_batch": (_async_batch, {"batch": 4}),
    "forever": (_forever, {}),
    "exit": (_exit, {}),
    "interrupt": (_interrupt, {}),
    "async_exit": (_async_exit, {}),
    "async_interrupt": (_async_interrupt, {}),
}


@pytest.fixture(scope="module", autouse=True)
def handlers() -> Iterator[None]:
    for name, (func, options) in HANDLERS.items():
        registry.task(PREFIX + name, **options)(func)
    yield
    for name in HANDLERS:
        registry.unregister(PREFIX + name)


@pytest.fixture
def in_test_transaction(db: Any) -> None:
    """A non-transactional test: everything below is rolled back at the end."""
    assert connection.in_atomic_block
    clear_queue()


def test_runs_inside_the_test_transaction(in_test_transaction: None) -> None:
    added = cq.submit(PREFIX + "add", {"a": 2, "b": 3})
    user_task = cq.submit(PREFIX + "make_user", {"username": "inline-user"})
    done = run_until_idle()
    assert sorted(row.id for row in done) == sorted([added.id, user_task.id])
    assert cq.get(added.id).status == "succeeded" and cq.get(added.id).result == 5
    # the handler's ORM write is on the test's connection, in its transaction
    assert User.objects.filter(username="inline-user").exists()
    assert cq.get(user_task.id).result == User.objects.get(username="inline-user").pk


def test_children_on_other_queues_run_too(in_test_transaction: None) -> None:
    parent = cq.submit(PREFIX + "parent", {"n": 41})
    run_until_idle()
    child_id = cq.get(parent.id).result
    child = cq.get(child_id)
    assert (child.queue, child.status, child.result, child.parent_id) == ("children", "succeeded", 42, parent.id)


def test_queue_filter_delay_and_unknown_names_stay_queued(in_test_transaction: None) -> None:
    elsewhere = cq.submit(PREFIX + "add", {"a": 1, "b": 1}, queue="elsewhere")
    later = cq.submit(PREFIX + "add", {"a": 1, "b": 1}, delay_ms=3_600_000)
    unknown = cq.submit("nobody.handles.this", {})
    here = cq.submit(PREFIX + "add", {"a": 1, "b": 1})
    assert [row.id for row in run_until_idle(["default"])] == [here.id]
    assert [cq.get(t.id).status for t in (elsewhere, later, unknown)] == ["queued"] * 3
    assert [row.id for row in run_until_idle()] == [elsewhere.id]
    assert cq.get(later.id).status == "queued" and cq.get(unknown.id).status == "queued"


def test_failures_follow_the_worker_rules(in_test_transaction: None) -> None:
    finishes = cq.submit(PREFIX + "flaky", {"succeed_on": 3}, max_attempts=3)
    gives_up = cq.submit(PREFIX + "flaky", {"succeed_on": 9}, max_attempts=2)
    refused = cq.submit(PREFIX + "refuse", {})
    attempts = run_until_idle()
    assert len(attempts) == 3 + 2 + 1  # every attempt's final row
    row = cq.get(finishes.id)
    assert (row.status, row.attempt, row.result) == ("succeeded", 3, "ok on 3")
    row = cq.get(gives_up.id)
    assert (row.status, row.attempt, row.error["code"], row.error["type"]) == ("failed", 2, "handler_error", "RuntimeError")
    row = cq.get(refused.id)
    assert (row.status, row.attempt, row.error["code"], row.error["retryable"]) == ("failed", 1, "bad_input", False)


def test_batches_and_async_handlers(in_test_transaction: None) -> None:
    batch = [cq.submit(PREFIX + "batch", {"i": i}) for i in range(3)]
    asynchronous = cq.submit(PREFIX + "async_progress", {})
    run_until_idle()
    results = sorted((cq.get(t.id).result for t in batch), key=str)
    # one call of three: the task the handler settled keeps its own result
    assert results == [{"settled": "by handler"}, {"size": 3}, {"size": 3}]
    row = cq.get(asynchronous.id)
    assert (row.status, row.result, row.message) == ("succeeded", "async done", "half way")


def test_a_batch_result_may_be_any_mapping(in_test_transaction: None) -> None:
    # As in the worker (tests/worker/test_settlement.py): a Mapping that is not
    # a dict fills results by task id; a task it leaves out succeeds with none.
    filled = [cq.submit("demo.mapping_batch", {"n": i}) for i in range(3)]
    left_out = cq.submit("demo.mapping_batch", {})
    run_until_idle(names=["demo.mapping_batch"])
    assert [(cq.get(t.id).status, cq.get(t.id).result) for t in filled] == [("succeeded", {"n": i}) for i in range(3)]
    assert (cq.get(left_out.id).status, cq.get(left_out.id).result) == ("succeeded", None)


def test_async_batch_handlers_read_large_payloads(in_test_transaction: None) -> None:
    # 300 KB: over the 256 KiB a claim returns inline.
    big = cq.submit(PREFIX + "async_batch", {"blob": "x" * 300_000})
    small = cq.submit(PREFIX + "async_batch", {"blob": "x" * 3})
    run_until_idle()
    assert (cq.get(big.id).status, cq.get(big.id).result) == ("succeeded", 300_000)
    assert (cq.get(small.id).status, cq.get(small.id).result) == ("succeeded", 3)


def test_signals_are_sent(in_test_transaction: None) -> None:
    heard: list[tuple[str, str]] = []

    def started(sender: Any, task_id: str, **kwargs: Any) -> None:
        heard.append(("started", task_id))

    def finished(sender: Any, task_id: str, status: str, **kwargs: Any) -> None:
        heard.append((status, task_id))

    signals.task_started.connect(started)
    signals.task_finished.connect(finished)
    try:
        task = cq.submit(PREFIX + "add", {"a": 0, "b": 0})
        run_until_idle()
    finally:
        signals.task_started.disconnect(started)
        signals.task_finished.disconnect(finished)
    assert heard == [("started", task.id), ("succeeded", task.id)]


def test_a_task_that_never_stops_raises_not_idle(in_test_transaction: None) -> None:
    cq.submit(PREFIX + "forever", {})
    with pytest.raises(NotIdle):
        run_until_idle(max_tasks=5)


def test_works_in_a_transactional_test_too(cairnq_db: Any) -> None:
    assert not connection.in_atomic_block
    task = cq.submit(PREFIX + "flaky", {"succeed_on": 2})
    run_until_idle(names=[PREFIX + "flaky"])
    row = cq.get(task.id)
    assert (row.status, row.attempt, row.worker_id) == ("succeeded", 2, "worker_inline")


def test_django_tasks_run_inline(in_test_transaction: None) -> None:
    pytest.importorskip("cairnq_django.backends")
    from testproject.native import tasks

    result = tasks.add.enqueue(20, 22)
    run_until_idle()
    assert tasks.add.get_result(result.id).return_value == 42


@pytest.mark.parametrize("handler", ["exit", "interrupt", "async_exit", "async_interrupt"])
def test_system_exit_and_keyboard_interrupt_fail_the_task(in_test_transaction: None, handler: str) -> None:
    raising = cq.submit(PREFIX + handler, {}, max_attempts=2)
    after = cq.submit(PREFIX + "add", {"a": 1, "b": 2})
    run_until_idle()  # nothing escapes
    row = cq.get(raising.id)
    kind = "KeyboardInterrupt" if handler.endswith("interrupt") else "SystemExit"
    # retryable like any handler exception in the worker: both attempts ran
    assert (row.status, row.attempt) == ("failed", 2)
    assert (row.error["type"], row.error["code"], row.error["retryable"]) == (kind, "handler_error", True)
    assert row.error["details"]["exception_class_path"] == f"builtins.{kind}"
    assert kind in row.error["details"]["traceback"] and f"in _{handler}" in row.error["details"]["traceback"]
    assert cq.get(after.id).result == 3


def test_django_tasks_that_exit_fail_inline(in_test_transaction: None) -> None:
    pytest.importorskip("cairnq_django.backends")
    from testproject.native import tasks

    exited = tasks.exit_now.enqueue(5)
    run_until_idle()
    error = tasks.exit_now.get_result(exited.id).errors[0]
    assert error.exception_class is SystemExit and "SystemExit: 5" in error.traceback


def test_inline_runs_write_the_worker_envelope(cairnq_db: Any, subprocess_env: dict[str, str]) -> None:
    from tests.native.test_backend import run_worker

    by_worker = cq.submit("native.plain.exit", {"code": 4}, max_attempts=1)
    run_worker(subprocess_env)
    inline = cq.submit("native.plain.exit", {"code": 4}, max_attempts=1)
    run_until_idle(names=["native.plain.exit"])
    written = [dict(cq.get(task.id).error) for task in (by_worker, inline)]
    tracebacks = [envelope["details"].pop("traceback") for envelope in written]
    assert written[0] == written[1] and written[0]["type"] == "SystemExit"
    for text in tracebacks:
        assert text.rstrip().endswith("SystemExit: 4") and "in plain_exit" in text
