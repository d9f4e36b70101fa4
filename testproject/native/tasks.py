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
