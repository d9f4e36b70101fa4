"""Pin the ``django.tasks`` backend: a function decorated with Django's own ``@task``
must be enqueued as a cairnq row (module-path name, ``{"args", "kwargs"}`` payload,
queue, priority, ``run_after``), be run by a real ``cairnq_worker --burst`` process,
and read back through ``get_result()`` with the documented status mapping (queued ->
READY, running -> RUNNING, succeeded -> SUCCESSFUL, failed and canceled -> FAILED),
the return value, Django-shaped errors and the decorator's cairnq options (key,
conflict, max_attempts, resource). Runs on Django 6.1 (``django.tasks``) and on
Django 5.2 with the ``django-tasks`` backport."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

backends = pytest.importorskip("cairnq_django.backends")

import cairnq_django as cq
from cairnq_django.tasks.registry import get_task
from testproject.native import tasks

REPO = Path(__file__).resolve().parents[2]
Status = backends.TaskResultStatus


def run_worker(env: dict[str, str], *args: str, timeout: float = 90) -> str:
    """Run ``cairnq_worker --burst`` to completion; return its output."""
    proc = subprocess.run(
        [sys.executable, "manage.py", "cairnq_worker", "--burst", "--poll-interval-ms", "50", *args],
        cwd=REPO,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return output


def row_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM cairnq_tasks")
        return int(cursor.fetchone()[0])


def test_framework_matches_the_django_line() -> None:
    import django

    expected = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
    assert backends.FRAMEWORK == expected
    assert isinstance(tasks.add, backends.CairnqTask)


def test_enqueue_writes_a_cairnq_row(cairnq_db: Any) -> None:
    result = tasks.echo.enqueue(1, (2, 3), flag=True, nested={"k": [None, "é"]})
    assert result.status == Status.READY
    assert result.id.startswith("task_")
    assert result.args == [1, [2, 3]]  # Django's rule: tuples become lists
    row = cq.get(result.id)
    assert row is not None
    assert row.name == "testproject.native.tasks.echo"
    assert row.payload == {"args": [1, [2, 3]], "kwargs": {"flag": True, "nested": {"k": [None, "é"]}}}
    assert (row.queue, row.priority, row.max_attempts) == ("native", 7, 3)
    assert row.status == "queued"
    assert result.enqueued_at is not None and abs(result.enqueued_at.timestamp() * 1000 - row.created_at_ms) < 1


def test_using_overrides_queue_priority_and_run_after(cairnq_db: Any) -> None:
    later = timezone.now() + dt.timedelta(hours=1)
    result = tasks.add.using(queue_name="other", priority=-100, run_after=later).enqueue(1, 2)
    row = cq.get(result.id)
    assert (row.queue, row.priority) == ("other", -100)
    # run_after becomes run_at_ms (delay measured from now; allow for the clock step)
    assert abs(row.run_at_ms - later.timestamp() * 1000) < 5_000
    got = tasks.add.get_result(result.id)
    assert got.status == Status.READY
    assert got.task.queue_name == "other" and got.task.priority == -100


def test_invalid_arguments_write_nothing(cairnq_db: Any) -> None:
    with pytest.raises(TypeError):
        tasks.add.enqueue(object(), 1)
    with pytest.raises(cq.SerializationError):
        tasks.add.enqueue(float("nan"), 1)
    with pytest.raises(backends.InvalidTask):
        tasks.add.using(priority=101)
    with pytest.raises(backends.InvalidTask):
        tasks.add.using(run_after=dt.datetime(2030, 1, 1))  # naive while USE_TZ
    assert row_count() == 0


def test_unknown_result_id(cairnq_db: Any) -> None:
    with pytest.raises(backends.TaskResultDoesNotExist):
        tasks.add.get_result("task_00000000000000000000000000")
    native = cq.submit("demo.noop", {})
    with pytest.raises(backends.TaskResultDoesNotExist):
        tasks.add.get_backend().get_result(native.id)


def test_worker_runs_django_tasks_and_results_come_back(cairnq_db: Any, subprocess_env: dict[str, str]) -> None:
    added = tasks.add.enqueue(2, 3)
    echoed = tasks.echo.enqueue("a", b=[1, 2])
    context = tasks.attempt_number.enqueue()
    doubled = tasks.async_double.enqueue(21)
    output = run_worker(subprocess_env, "--queue", "default", "--queue", "native")
    assert "testproject.native.tasks.add" in output  # registered in the worker process

    result = tasks.add.get_result(added.id)
    assert result.status == Status.SUCCESSFUL, result.errors
    assert result.return_value == 5
    assert result.finished_at is not None and result.errors == []
    assert result.attempts == 1 and result.worker_ids[0].startswith("worker_")

    assert tasks.echo.get_result(echoed.id).return_value == {"args": ["a"], "kwargs": {"b": [1, 2]}}
    assert tasks.attempt_number.get_result(context.id).return_value == 1
    assert tasks.async_double.get_result(doubled.id).return_value == 42

    # refresh() updates a result object the caller kept from enqueue()
    assert added.status == Status.READY
    added.refresh()
    assert added.status == Status.SUCCESSFUL and added.return_value == 5


def test_failures_map_to_failed_with_django_errors(cairnq_db: Any, subprocess_env: dict[str, str]) -> None:
    retried = tasks.boom.enqueue("kaput")
    once = tasks.fail_once_only.enqueue("only once")
    unserializable = tasks.bad_result.enqueue()
    run_worker(subprocess_env, "--retry-backoff-ms", "0")

    result = tasks.boom.get_result(retried.id)
    assert result.status == Status.FAILED
    assert result.attempts == 3  # OPTIONS MAX_ATTEMPTS default (cairnq's 3)
    (error,) = result.errors
    assert error.exception_class is ValueError
    assert "kaput" in error.traceback and "Traceback" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value

    row = cq.get(once.id)
    assert (row.status, row.attempt, row.max_attempts) == ("failed", 1, 1)  # decorator's max_attempts
    assert tasks.fail_once_only.get_result(once.id).errors[0].exception_class is RuntimeError

    row = cq.get(unserializable.id)
    assert (row.status, row.attempt, row.error["code"]) == ("failed", 1, "unserializable_result")


def test_canceled_and_running_rows_map(cairnq_db: Any, store: Any) -> None:
    canceled = tasks.add.enqueue(1, 1)
    cq.cancel(canceled.id)
    result = tasks.add.get_result(canceled.id)
    assert result.status == Status.FAILED
    assert [e.exception_class_path for e in result.errors] == [backends.CANCELED_ERROR_PATH]

    running = tasks.add.enqueue(2, 2)
    claimed = store.claim(["default"], "worker_probe", lease_ms=60_000, names=["testproject.native.tasks.add"])
    assert [row.id for row in claimed] == [running.id]
    result = tasks.add.get_result(running.id)
    assert result.status == Status.RUNNING
    assert result.worker_ids == ["worker_probe"]
    with pytest.raises(ValueError):
        _ = result.return_value


def test_status_map_covers_every_cairnq_status() -> None:
    from cairnq_django.models import TaskStatus

    assert set(backends.STATUS_MAP) == set(TaskStatus.values)


def test_decorator_carries_cairnq_options(cairnq_db: Any) -> None:
    first = tasks.process_order.enqueue(7)
    again = tasks.process_order.enqueue(7)
    other = tasks.process_order.enqueue(8)
    assert first.id == again.id != other.id
    assert cq.get_by_key("order:7").id == first.id

    rejecting = tasks.process_order.with_options(key="order:7", conflict="reject")
    with pytest.raises(cq.AlreadyExists):
        rejecting.enqueue(7)

    definition = get_task("testproject.native.tasks.on_gpu")
    assert (definition.resource, definition.concurrency) == ("gpu", 1)

    with pytest.raises(backends.InvalidTask):
        tasks.add.with_options(conflict="sometimes")
    with pytest.raises(backends.InvalidTask):
        tasks.add.with_options(max_attempts=0)
    with pytest.raises(TypeError):
        tasks.add.with_options(queue="x")


def test_enqueue_joins_the_callers_transaction(cairnq_db: Any) -> None:
    heard: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        heard.append(task_result.id)

    backends.task_enqueued.connect(receiver)
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            tasks.add.enqueue(1, 2)
            raise RuntimeError("roll back")
        assert row_count() == 0 and heard == []
        with transaction.atomic():
            kept = tasks.add.enqueue(3, 4)
            assert heard == []  # not before the commit
        assert heard == [kept.id]
    finally:
        backends.task_enqueued.disconnect(receiver)


def test_backend_checks(settings: Any) -> None:
    settings.TASKS = {
        "default": {"BACKEND": "cairnq_django.backends.CairnqBackend", "QUEUES": []},
        "odd": {
            "BACKEND": "cairnq_django.backends.CairnqBackend",
            "QUEUES": ["default", "reports"],
            "OPTIONS": {"MAX_ATEMPTS": 2, "MAX_ATTEMPTS": 0},
        },
    }
    assert list(backends.task_backends["default"].check()) == []
    messages = list(backends.task_backends["odd"].check())
    assert sorted(m.id for m in messages) == ["cairnq.E020", "cairnq.E021", "cairnq.W020"]
    assert any("MAX_ATEMPTS" in m.msg for m in messages)
    assert any("'reports'" in m.msg for m in messages)


def test_run_after_in_the_past_runs_now(cairnq_db: Any) -> None:
    result = tasks.add.using(run_after=timezone.now() - dt.timedelta(minutes=5)).enqueue(1, 1)
    row = cq.get(result.id)
    assert row.run_at_ms <= int(time.time() * 1000) + 1_000


def test_async_enqueue_and_get_result(cairnq_db: Any) -> None:
    from asgiref.sync import async_to_sync

    result = async_to_sync(tasks.add.aenqueue)(4, 5)
    assert cq.get(result.id).payload == {"args": [4, 5], "kwargs": {}}
    again = async_to_sync(tasks.add.aget_result)(result.id)
    assert (again.id, again.status) == (result.id, Status.READY)
