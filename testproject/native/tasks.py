"""Functions decorated with Django's own ``@task`` (django.tasks or the backport).

Autodiscovered like any app's ``tasks`` module, which is what registers them
with a ``cairnq_worker`` process. Without a task framework installed (Django
5.2 without django-tasks) the module defines nothing.
"""

from __future__ import annotations

from typing import Any

try:
    from cairnq_django.backends import django_task as task
except Exception:  # noqa: BLE001 - no framework installed: nothing to define
    task = None

if task is not None:

    @task
    def add(a: int, b: int) -> int:
        """Return the sum: the result round-trip test."""
        return a + b

    @task(queue_name="native", priority=7)
    def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
        """Return what it was given, to pin the args/kwargs payload."""
        return {"args": list(args), "kwargs": kwargs}

    @task
    def boom(message: str) -> None:
        """Raise, so the FAILED mapping and the error list can be read back."""
        raise ValueError(message)

    @task(takes_context=True)
    def attempt_number(context: Any) -> int:
        """Return the attempt Django's TaskContext reports."""
        return int(context.attempt)

    @task
    async def async_double(x: int) -> int:
        """An ``async def`` task, run by the worker through ``Task.call``."""
        return x * 2

    @task
    def bad_result() -> Any:
        """Return something JSON cannot carry: the task must fail permanently."""
        return {1, 2}

    @task(max_attempts=1)
    def fail_once_only(message: str) -> None:
        """Fail on the only attempt the decorator allows: FAILED at once, attempt 1."""
        raise RuntimeError(message)

    @task(key=lambda order_id: f"order:{order_id}", conflict="reuse")
    def process_order(order_id: int) -> int:
        """Keyed by its argument: enqueueing the same order twice reuses the task."""
        return order_id

    @task(resource="gpu", concurrency=1)
    def on_gpu() -> str:
        """Joins the ``gpu`` resource: the worker's banner and slots must show it."""
        return "gpu"

    @task
    def create_user(username: str) -> int:
        """Write a project model from a task: with routing, the row goes to ``default``
        while the task row lives in the queue database."""
        from django.contrib.auth.models import User

        return int(User.objects.create(username=username).pk)

    @task(max_attempts=1)
    def exit_now(code: int) -> None:
        """Call ``sys.exit`` in a task: a failure like any other, never the worker's exit."""
        raise SystemExit(code)

    @task(max_attempts=1)
    def interrupt() -> None:
        """Raise ``KeyboardInterrupt`` in a task: the task fails, the worker goes on."""
        raise KeyboardInterrupt

    @task(max_attempts=1)
    def decline(reason: str) -> None:
        """Fail with cairnq's ``TaskError`` and a ``type`` no Python class is named after."""
        from cairnq_django.exceptions import TaskError

        raise TaskError(reason, type="PaymentDeclined", code="declined")

    @task(max_attempts=1)
    def local_failure() -> None:
        """Raise a class defined inside the function: no import can reach it."""

        class OnlyHere(Exception):
            pass

        raise OnlyHere("defined in a function")

    @task(max_attempts=1)
    def verbose_failure(size: int) -> None:
        """Fail with a ``size``-character message: a traceback longer than the stored bound."""
        raise LookupError("x" * size)

    @task(max_attempts=1)
    async def async_boom(message: str) -> None:
        """An ``async def`` task that raises: its traceback must be stored too."""
        raise ValueError(message)

    _snoozed_once: set[str] = set()

    @task(takes_context=True, max_attempts=1)
    def snooze_once(context: Any, delay_ms: int) -> int:
        """Raise ``cairnq.Snooze`` on the first run, then return the attempt Django reports."""
        from cairnq_django.exceptions import Snooze

        if context.task_result.id not in _snoozed_once:
            _snoozed_once.add(context.task_result.id)
            raise Snooze(delay_ms=delay_ms)
        return int(context.attempt)

    @task(max_attempts=1)
    def sleepy(seconds: float) -> None:
        """Outrun ``--max-run-ms``: fails with ``handler_timeout``."""
        import time

        time.sleep(seconds)


# Plain cairnq handlers beside the Django tasks: failures the worker must
# describe the same way (class path and traceback in the envelope's details).
from cairnq_django.tasks.registry import task as cairnq_task  # noqa: E402


@cairnq_task("native.plain.boom", max_attempts=1)
def plain_boom(ctx: Any, payload: dict[str, Any]) -> None:
    raise ValueError(payload["message"])


@cairnq_task("native.plain.exit", max_attempts=1)
def plain_exit(ctx: Any, payload: dict[str, Any]) -> None:
    raise SystemExit(payload.get("code", 1))


@cairnq_task("native.plain.async_boom", max_attempts=1)
async def plain_async_boom(ctx: Any, payload: dict[str, Any]) -> None:
    raise KeyError(payload["message"])


@cairnq_task("native.plain.batch_boom", batch=5, max_attempts=1)
def plain_batch_boom(ctxs: list[Any]) -> None:
    raise RuntimeError(f"batch of {len(ctxs)} failed")


@cairnq_task("native.plain.decline", max_attempts=1)
def plain_decline(ctx: Any) -> None:
    from cairnq_django.exceptions import TaskError

    raise TaskError("card declined", type="PaymentDeclined", code="declined", details={"card": "visa"})
