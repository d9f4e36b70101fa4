"""cairnq-django: a durable, database-backed task queue, wire-compatible with cairnq v1.

The public API lives here. Django imports this package while it is still
loading ``INSTALLED_APPS``, before any model may be imported, so names that
need the app registry (``Task``, ``TaskStatus``, ``QueuePause``, ``task``,
``TaskContext``) are resolved lazily by the module ``__getattr__`` on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from typing import TYPE_CHECKING, Any

from .client.async_api import (
    acall,
    acancel,
    acancel_by_key,
    aget,
    aget_by_key,
    aget_status,
    aget_status_by_key,
    apause_queue,
    apaused_queues,
    apurge,
    aqueue_depth,
    aresume_queue,
    aretry,
    aretry_by_key,
    astats,
    asubmit,
    asubmit_many,
    await_task,
    await_task_by_key,
    aworkers,
)
from .client.async_api import alist_tasks as alist
from .client.queries import (
    cancel,
    cancel_by_key,
    get,
    get_by_key,
    get_status,
    get_status_by_key,
    purge,
    queue_depth,
    retry,
    retry_by_key,
    stats,
)
from .client.queries import list_tasks as list
from .client.pauses import pause_queue, paused_queues, resume_queue
from .client.submit import submit, submit_many
from .client.wait import TaskRef, call, wait, wait_by_key
from .client.workers import WorkerInfo, workers
from .exceptions import (
    AlreadyExists,
    CairnQError,
    DatabaseFull,
    LostLease,
    PayloadTooLarge,
    QueueFull,
    SchemaNotInstalled,
    SerializationError,
    Snooze,
    TaskCanceled,
    TaskError,
    TaskFailed,
    TaskTimeout,
    UnknownTask,
    UnknownTaskWarning,
)

if TYPE_CHECKING:
    from .tasks.context import TaskContext
    from .models import QueuePause, Task, TaskStatus
    from .tasks.registry import task

# name -> module that defines it, imported on first access.
_LAZY = {
    "Task": ".models",
    "TaskStatus": ".models",
    "task": ".tasks.registry",
    "periodic": ".tasks.periodic",
    "TaskContext": ".tasks.context",
    "QueuePause": ".models",
    # Workflows (docs/workflows.md): their modules read the models.
    "Workflow": ".workflows.workflow",
    "Batch": ".workflows.batch",
    "chain": ".workflows.canvas",
    "group": ".workflows.canvas",
    "chord": ".workflows.canvas",
    "signature": ".workflows.canvas",
    "Signature": ".workflows.canvas",
    "WorkflowError": ".workflows.graph",
    "WorkflowNotFound": ".workflows.run",
    "WorkflowRunHandle": ".workflows.run",
    "cancel_workflow": ".workflows.run",
    "get_workflow": ".workflows.run",
    "retry_workflow": ".workflows.run",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> Sequence[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    # submit and read
    "submit",
    "submit_many",
    "get",
    "get_by_key",
    "get_status",
    "get_status_by_key",
    "list",
    "stats",
    "queue_depth",
    # change
    "cancel",
    "cancel_by_key",
    "retry",
    "retry_by_key",
    "purge",
    # pause
    "pause_queue",
    "resume_queue",
    "paused_queues",
    # workers
    "workers",
    # wait
    "wait",
    "wait_by_key",
    "call",
    # async twins
    "asubmit",
    "asubmit_many",
    "aget",
    "aget_by_key",
    "aget_status",
    "aget_status_by_key",
    "alist",
    "astats",
    "aqueue_depth",
    "acancel",
    "acancel_by_key",
    "aretry",
    "aretry_by_key",
    "apurge",
    "apause_queue",
    "aresume_queue",
    "apaused_queues",
    "aworkers",
    "await_task",
    "await_task_by_key",
    "acall",
    # types
    "Task",
    "TaskRef",
    "WorkerInfo",
    "TaskStatus",
    "QueuePause",
    "task",
    "TaskContext",
    # workflows (docs/workflows.md)
    "Workflow",
    "Batch",
    "chain",
    "group",
    "chord",
    "signature",
    "Signature",
    "WorkflowRunHandle",
    "get_workflow",
    "cancel_workflow",
    "retry_workflow",
    "WorkflowError",
    "WorkflowNotFound",
    # errors
    "CairnQError",
    "SerializationError",
    "AlreadyExists",
    "LostLease",
    "TaskError",
    "Snooze",
    "TaskFailed",
    "TaskCanceled",
    "TaskTimeout",
    "QueueFull",
    "DatabaseFull",
    "PayloadTooLarge",
    "UnknownTask",
    "UnknownTaskWarning",
    "SchemaNotInstalled",
]
