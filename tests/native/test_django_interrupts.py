"""Pin Django's contract for what a task raises, where ``CairnqBackend`` runs its tasks
(issue 35). Django's ImmediateBackend, and Django's own test
``test_throws_keyboard_interrupt``: a ``KeyboardInterrupt`` from a task propagates, with
no ERROR on the ``django.tasks`` logger and no ``task_finished``; any other
``BaseException`` (``SystemExit``, ``GeneratorExit``, a subclass of its own) finishes
the task FAILED, with ``task_finished`` and the error logged. ``enqueue`` runs nothing
here, so the contract is checked where the task runs: inline in ``run_until_idle``
(the interrupt leaves it and the task is queued again) and in a ``cairnq_worker``
process (the handler lets the interrupt through to the worker, which fails the task and
goes on: a handler thread's interrupt is no user's Ctrl-C). Sync and async tasks; on
Django 6.1 (``django.tasks``) and on 5.2 with the django-tasks backport, whose
ImmediateBackend behaves the same."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

backends = pytest.importorskip("cairnq_django.backends")

import cairnq_django as cq
from cairnq_django.tasks import registry
from cairnq_django.testing import run_until_idle
from tests.conftest import clear_queue
from tests.native.test_backend import REPO

Status = backends.TaskResultStatus
# Django's task logger: "django.tasks", or "django_tasks" for the backport.
LOGGER = backends.FRAMEWORK


class OwnBaseException(BaseException):
    """Neither an Exception nor an interrupt: Django fails the task with it."""


@backends.django_task
def interrupted() -> None:
    raise KeyboardInterrupt


@backends.django_task
async def async_interrupted() -> None:
    raise KeyboardInterrupt


@backends.django_task(max_attempts=1)
def exits() -> None:
    raise SystemExit(3)


@backends.django_task(max_attempts=1)
def generator_exit() -> None:
    raise GeneratorExit


@backends.django_task(max_attempts=1)
def own_base_exception() -> None:
    raise OwnBaseException("not an Exception")


@backends.django_task
def adds(a: int, b: int) -> int:
    return a + b


@contextmanager
def observed() -> Iterator[dict[str, list[Any]]]:
    """Record ERROR records on Django's task logger and every Django ``task_finished``."""
    seen: dict[str, list[Any]] = {"errors": [], "finished": []}

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen["errors"].append(record)

    def finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen["finished"].append(task_result)

    logger = logging.getLogger(LOGGER)
    handler = Keep(level=logging.ERROR)
    logger.addHandler(handler)  # on the logger itself: whatever propagates, it sees them
    backends.task_finished.connect(finished)
    try:
        yield seen
    finally:
        backends.task_finished.disconnect(finished)
        logger.removeHandler(handler)


@pytest.fixture
def in_test_transaction(db: Any) -> None:
    clear_queue()


# ---------------------------------------------------------------- inline (run_until_idle)
@pytest.mark.parametrize("task", [interrupted, async_interrupted], ids=["sync", "async"])
def test_throws_keyboard_interrupt(in_test_transaction: None, task: Any) -> None:
    """Django's test, where this backend runs the task."""
    result = task.enqueue()
    started: list[Any] = []

    def on_start(sender: Any, task_result: Any, **kwargs: Any) -> None:
        started.append(task_result.id)

    backends.task_started.connect(on_start)
    try:
        with observed() as seen, pytest.raises(KeyboardInterrupt):
            run_until_idle()
    finally:
        backends.task_started.disconnect(on_start)
    assert seen == {"errors": [], "finished": []}
    assert started == [result.id]  # it did run, as in ImmediateBackend
    # not finished: the task is queued again, the interrupted attempt uncounted
    row = cq.get(result.id)
    assert (row.status, row.attempt, row.worker_id, row.error) == ("queued", 0, None, None)
    assert task.get_result(result.id).status == Status.READY


def test_an_interrupt_stops_the_run_and_leaves_the_rest_queued(in_test_transaction: None) -> None:
    first = interrupted.enqueue()
    later = adds.using(priority=-1).enqueue(1, 2)  # claimed after the interrupt
    with pytest.raises(KeyboardInterrupt):
        run_until_idle()
    assert cq.get(first.id).status == "queued" and cq.get(later.id).status == "queued"
    run_until_idle(names=[adds.module_path])  # the others still run once asked
    assert adds.get_result(later.id).return_value == 3


@pytest.mark.parametrize(
    ("task", "exception"),
    [(exits, SystemExit), (generator_exit, GeneratorExit), (own_base_exception, OwnBaseException)],
    ids=["SystemExit", "GeneratorExit", "own BaseException"],
)
def test_other_base_exceptions_fail_the_task(in_test_transaction: None, task: Any, exception: type) -> None:
    """As ImmediateBackend: FAILED, task_finished sent, the error logged; nothing escapes."""
    result = task.enqueue()
    with observed() as seen:
        run_until_idle()
    (finished,) = seen["finished"]
    assert (finished.id, finished.status) == (result.id, Status.FAILED)
    assert finished.errors[0].exception_class is exception
    (record,) = seen["errors"]
    assert result.id in record.getMessage() and record.exc_info and record.exc_info[0] is exception
    stored = task.get_result(result.id)
    assert stored.status == Status.FAILED and stored.errors[0].exception_class is exception


def test_a_plain_handlers_interrupt_still_fails_its_task(in_test_transaction: None) -> None:
    """Django's contract is for Django tasks: a cairnq handler's interrupt stays its failure."""
    name = "tests.native.interrupts.plain"

    def plain(ctx: Any) -> None:
        raise KeyboardInterrupt

    registry.task(name, max_attempts=1)(plain)
    try:
        task = cq.submit(name)
        run_until_idle(names=[name])  # nothing escapes
    finally:
        registry.unregister(name)
    row = cq.get(task.id)
    assert (row.status, row.error["type"]) == ("failed", "KeyboardInterrupt")


# ---------------------------------------------------------------- in a worker process
WORKER_SCRIPT = """
import json, logging, sys
import django
django.setup()
from django.core.management import call_command
from cairnq_django import backends

seen = {"errors": [], "finished": []}

class Keep(logging.Handler):
    def emit(self, record):
        seen["errors"].append(record.getMessage())

logging.getLogger(backends.FRAMEWORK).addHandler(Keep(level=logging.ERROR))
backends.task_finished.connect(
    lambda sender, task_result, **kw: seen["finished"].append([task_result.id, str(task_result.status)]),
    weak=False,
)
call_command("cairnq_worker", "--burst", "--poll-interval-ms", "50")
print("SEEN " + json.dumps(seen))
"""


def test_a_worker_lets_the_interrupt_through_the_django_layer(cairnq_db: Any, subprocess_env: dict[str, str]) -> None:
    from testproject.native import tasks  # imported by the worker process too

    interrupt = tasks.interrupt.enqueue()
    exited = tasks.exit_now.enqueue(3)
    added = tasks.add.enqueue(2, 3)
    proc = subprocess.run(
        [sys.executable, "-c", WORKER_SCRIPT],
        cwd=REPO,
        env=subprocess_env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("SEEN "))
    seen = json.loads(line.removeprefix("SEEN "))
    finished = dict(seen["finished"])
    # the interrupt: no task_finished, no error on Django's logger
    assert interrupt.id not in finished
    assert not [message for message in seen["errors"] if interrupt.id in message]
    # SystemExit: finished FAILED and logged, as in ImmediateBackend
    assert finished[exited.id] == str(Status.FAILED)
    assert [message for message in seen["errors"] if exited.id in message]
    assert finished[added.id] == str(Status.SUCCESSFUL)  # the worker went on
    # the worker records what reached it: the interrupted task failed with it
    row = cq.get(interrupt.id)
    assert (row.status, row.error["type"]) == ("failed", "KeyboardInterrupt")
