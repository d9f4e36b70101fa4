"""Errors raised by cairnq_django; names match the upstream cairnq SDKs."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError

from .protocol.bounds import DELAY_MS


class CairnQError(Exception):
    """Base class of every cairnq_django runtime error."""


class SerializationError(CairnQError, ValueError):
    """A payload, metadata or result that JSON cannot carry; nothing was written."""


class AlreadyExists(CairnQError):
    """A keyed submit with ``conflict="reject"`` found a recorded task."""

    def __init__(self, key: str) -> None:
        super().__init__(f"a task already exists for key {key!r}")
        self.key = key


class LostLease(CairnQError):
    """A worker write found the task no longer owned by this worker."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"lease lost for task {task_id}")
        self.task_id = task_id


class TaskError(CairnQError):
    """Raise from a handler to fail a task with a chosen envelope.

    Unlike any other exception, a ``TaskError`` is not retried unless
    ``retryable=True`` is given.
    """

    def __init__(
        self,
        message: str = "task failed",
        *,
        type: str = "TaskError",
        code: str = "task_error",
        retryable: bool = False,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.type = type
        self.code = code
        self.retryable = retryable
        self.details = details or {}

    def envelope(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
            "details": self.details,
        }


class Snooze(CairnQError):
    """Raise from a handler to run the task again in ``delay_ms``; the attempt does not count.

    The task goes back to ``queued`` at now + ``delay_ms`` with its attempt
    handed back (as the worker does at a drain deadline), so ``max_attempts``
    bounds only the attempts that ended otherwise. A batch handler may also
    return a ``Snooze`` as one task's value in its result mapping. ``delay_ms``
    follows submit's rule: an int from 0 to 100 years of milliseconds.
    """

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = DELAY_MS.check(delay_ms, "delay_ms")
        super().__init__(f"snoozed for {delay_ms} ms")

    def __repr__(self) -> str:
        return f"Snooze(delay_ms={self.delay_ms})"

    def __reduce__(self) -> tuple[type[Snooze], tuple[int]]:
        # The message is not the constructor's argument: rebuild from the delay.
        return (Snooze, (self.delay_ms,))


class TaskFailed(CairnQError):
    """A waited-for task ended ``failed``; the envelope members are attributes."""

    def __init__(self, task_id: str, envelope: dict[str, Any] | None) -> None:
        envelope = dict(envelope or {})
        self.task_id = task_id
        self.envelope = envelope
        self.type = envelope.get("type") or "TaskError"
        self.code = envelope.get("code") or "task_error"
        self.message = envelope.get("message") or "task failed"
        self.retryable = bool(envelope.get("retryable", False))
        self.details = envelope.get("details") or {}
        super().__init__(f"task {task_id} failed: {self.type}: {self.message}")


class TaskCanceled(CairnQError):
    """A waited-for task ended ``canceled``."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id} was canceled")
        self.task_id = task_id


class TaskTimeout(CairnQError):
    """A wait passed its deadline; the task itself keeps running."""

    def __init__(
        self, task_id: str | None, snapshot: Any = None, key: str | None = None, hint: str | None = None
    ) -> None:
        what = f"task {task_id}" if task_id else f"task for key {key!r}"
        # hint: the likely cause, when the wait could tell (client/unserved.py).
        super().__init__(f"timed out waiting for {what}" + (f": {hint}" if hint else ""))
        self.task_id = task_id
        self.snapshot = snapshot
        self.key = key
        self.hint = hint


class QueueFull(CairnQError):
    """The submit gate waited its whole budget for headroom; nothing was enqueued."""

    def __init__(self, queue: str, waited_ms: int) -> None:
        super().__init__(f"queue {queue!r} stayed full for {waited_ms} ms")
        self.queue = queue
        self.waited_ms = waited_ms


class PayloadTooLarge(CairnQError, ValueError):
    """A payload's JSON is larger than ``CAIRNQ["MAX_PAYLOAD_BYTES"]``; nothing was enqueued."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"payload is {size} bytes of JSON, over the {limit}-byte limit "
            '(CAIRNQ["MAX_PAYLOAD_BYTES"]); pass large data by reference (a URL or '
            "storage key) or raise the limit"
        )
        self.size = size
        self.limit = limit


class UnknownTask(CairnQError, LookupError):
    """A task name that no installed app declares (``CAIRNQ["UNKNOWN_TASKS"] = "raise"``); nothing was enqueued."""

    def __init__(self, name: str, message: str | None = None) -> None:
        super().__init__(message or f"no installed app declares a task named {name!r}")
        self.name = name


class UnknownTaskWarning(UserWarning):
    """A task name that no installed app declares was enqueued (``CAIRNQ["UNKNOWN_TASKS"] = "warn"``)."""


class SchemaNotInstalled(CairnQError, ImproperlyConfigured):
    """The cairnq tables are missing: ``manage.py migrate cairnq`` has not run.

    Also Django's ``ImproperlyConfigured``: the fix is a setup step, not a retry.
    """

    def __init__(self, alias: str) -> None:
        super().__init__(
            f"the cairnq tables are missing from database {alias!r}; run manage.py migrate cairnq"
        )
        self.alias = alias


class DatabaseFull(CairnQError, OperationalError):
    """The SQLite database could not grow: its disk is full; nothing of the write was stored.

    It is also Django's ``OperationalError``, so code that already handles
    database errors keeps working, and the worker retries its own writes
    (claims, heartbeats, settlements) until space is freed, as it does for an
    outage.
    """

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(
            f"the SQLite database {path} is full: free space on its filesystem "
            f"(or raise PRAGMA max_page_count); nothing of this write was stored "
            f"(SQLite: {detail})"
        )
        self.path = path
