"""Helpers for the admin tests: tasks in a chosen state, made through the store,
and staff users holding exactly the permissions a test names."""

from __future__ import annotations

import itertools
import json
from typing import Any

from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType

from cairnq_django.models import Task
from cairnq_django.store import SubmitSpec

WORKER = "worker_admin_tests"
# A changelist row's task id: the title of the id under the name in its link column.
ROW_ID = r'<th class="field-task_cell"><a href="[^"]*">(?:(?!</th>).)*?<span class="cairnq-id" title="([^"]*)"'
ERROR = {"type": "ValueError", "code": "handler_error", "message": "boom", "retryable": False, "details": {}}
_names = itertools.count()


def make_task(
    store: Any,
    state: str = "queued",
    *,
    name: str | None = None,
    queue: str = "default",
    payload: Any = None,
    **spec: Any,
) -> Task:
    """Submit a task and walk it through the store's operations to ``state``.

    ``state`` is a status or ``cancel_requested``. Each task gets its own name
    unless one is given, so the claim below takes exactly this task.
    """
    name = name or f"admin.t{next(_names)}"
    task = store.submit(
        SubmitSpec(name=name, queue=queue, payload_json=json.dumps({} if payload is None else payload), **spec)
    )
    if state == "queued":
        return task
    if state == "canceled":
        store.cancel(task.id)
        return store.get(task.id)
    claimed = store.claim([queue], WORKER, lease_ms=300_000, names=[name])
    assert [row.id for row in claimed] == [task.id], "the claim must take the task just made"
    if state == "running":
        pass
    elif state == "cancel_requested":
        store.cancel(task.id)
    elif state == "succeeded":
        store.complete(task.id, WORKER, json.dumps({"ok": True}))
    elif state == "failed":
        store.fail(task.id, WORKER, ERROR, retryable=False)
    else:
        raise ValueError(state)
    return store.get(task.id)


def staff_user(username: str, *codenames: str) -> User:
    """Create a staff user (password ``pw``) holding only the given task permissions."""
    user = User.objects.create_user(username, password="pw", is_staff=True)
    content_type = ContentType.objects.get_for_model(Task)
    for codename in codenames:
        user.user_permissions.add(Permission.objects.get(content_type=content_type, codename=codename))
    return User.objects.get(pk=user.pk)  # drop the cached permission set


def status_of(task_id: str) -> tuple[str, int | None, int]:
    """Return ``(status, cancel_requested_at_ms, attempt)`` read fresh from the table."""
    row = Task.objects.values_list("status", "cancel_requested_at_ms", "attempt").get(pk=task_id)
    return row[0], row[1], row[2]
