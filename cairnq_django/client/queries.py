"""Read and change tasks by id or key: get, status, list, stats, queue depth, cancel, retry, purge.

Each call validates its arguments (``protocol.validation``) before the store
runs one statement; ``client/async_api.py`` holds the async twins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol import bounds, validation
from ..store import get_store
from .schema_guard import needs_schema
from .wait import TaskRef, task_ref

if TYPE_CHECKING:
    from ..models import Task


@needs_schema
def get(task_id: str) -> Task | None:
    """Return the task with this id, or None."""
    bounds.check_text(task_id, "task_id")
    return get_store().get(task_id)


@needs_schema
def get_by_key(key: str) -> Task | None:
    """Return the task the key currently points at, or None."""
    bounds.check_text(key, "key")
    return get_store().get_by_key(key)


@needs_schema
def get_status(task_id: str) -> TaskRef | None:
    """Return ``(id, status)`` without the payload: the cheap polling read."""
    bounds.check_text(task_id, "task_id")
    return task_ref(get_store().get_status(task_id))


@needs_schema
def get_status_by_key(key: str) -> TaskRef | None:
    """Return ``(id, status)`` of the task the key points at now, or None."""
    bounds.check_text(key, "key")
    return task_ref(get_store().get_status_by_key(key))


@needs_schema
def list_tasks(
    *,
    status: str | None = None,
    queue: str | None = None,
    name: str | None = None,
    root_id: str | None = None,
    correlation_id: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[Task]:
    """Return tasks newest first, filtered by whichever arguments are given.

    Exported as ``cairnq_django.list``.
    """
    validation.check_list_args(status, limit, offset)
    validation.check_optional_texts(queue=queue, name=name, root_id=root_id, correlation_id=correlation_id)
    return get_store().list(
        status=status,
        queue=queue,
        name=name,
        root_id=root_id,
        correlation_id=correlation_id,
        limit=limit,
        offset=offset,
    )


@needs_schema
def stats(queue: str | None = None) -> dict[str, dict[str, int]]:
    """Return ``{queue: {status: count}}`` with all five statuses present."""
    validation.check_optional_texts(queue=queue)
    return get_store().stats(queue)


@needs_schema
def queue_depth(queue: str, max_depth: int) -> int:
    """Return how many more tasks fit on ``queue`` under ``max_depth`` (0 when full)."""
    bounds.check_text(queue, "queue")
    validation.check_max_depth(max_depth)
    return get_store().queue_depth(queue, max_depth)


@needs_schema
def cancel(task_id: str) -> Task | None:
    """Cancel a live task: a queued one ends now, a running one is asked to stop.

    Returns the updated row, or None when the task is terminal or missing.
    """
    bounds.check_text(task_id, "task_id")
    return get_store().cancel(task_id)


@needs_schema
def cancel_by_key(key: str) -> Task | None:
    """Cancel the task the key points at (see ``cancel``)."""
    bounds.check_text(key, "key")
    return get_store().cancel_by_key(key)


@needs_schema
def retry(task_id: str, *, reset_attempt: bool = False) -> Task | None:
    """Re-queue a failed or canceled task under the same id; None otherwise."""
    bounds.check_text(task_id, "task_id")
    return get_store().retry(task_id, reset_attempt=reset_attempt)


@needs_schema
def retry_by_key(key: str, *, reset_attempt: bool = False) -> Task | None:
    """Re-queue the failed or canceled task the key points at (see ``retry``)."""
    bounds.check_text(key, "key")
    return get_store().retry_by_key(key, reset_attempt=reset_attempt)


@needs_schema
def purge(
    *,
    older_than_ms: int = 0,
    queue: str | None = None,
    status: str | None = None,
    name: str | None = None,
    limit: int = 1000,
) -> list[str]:
    """Delete up to ``limit`` terminal tasks finished over ``older_than_ms`` ago; return their ids."""
    validation.check_purge_args(older_than_ms, limit, status)
    validation.check_optional_texts(queue=queue, name=name)
    return get_store().purge(
        older_than_ms=older_than_ms, queue=queue, status=status, name=name, limit=limit
    )
