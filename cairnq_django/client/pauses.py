"""Pause and resume a queue: ``pause_queue``, ``resume_queue``, ``paused_queues``.

A pause is one row of ``cairnq_django_queue_pause`` (``QueuePause``), and
every claim statement of both dialects skips the queues listed there, so a
pause holds for every worker of this app on every host and across restarts;
running tasks finish, and submitting to a paused queue still works (the
tasks wait). Workers of the other SDKs do not read the table.

Resuming deletes the row. On PostgreSQL it also sends the notification an
insert sends (channel ``cairnq_queued``, the queue as payload, delivered at
commit), so idle workers claim at once instead of at their next poll; on
SQLite the commit itself wakes them (``worker/wakeups.py``).

``unused_queue_problem`` tells a queue nothing uses (a typo: ``deafult``)
from one in use, for ``cairnq_queues pause``; ``pause_queue`` itself pauses
any name, since a queue may be paused ahead of its first task.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction

from ..conf import get_config
from ..protocol import bounds
from ..store import get_store
from ..tasks.registry import registered
from .schema_guard import needs_schema

if TYPE_CHECKING:
    from ..models import QueuePause

# The insert trigger's notification (store/postgres/sql/schema/0003_notify.sql):
# PgWaker wakes for a payload naming one of its queues. A driver command with
# no SQLite counterpart, so not a per-dialect statement file.
_NOTIFY_QUEUED = "SELECT pg_notify('cairnq_queued', %s)"
# QueuePause.paused_by's width: a Django username fits.
MAX_BY_CHARS = 150


def reason_problem(value: Any) -> str | None:
    """Say what is wrong with a pause's reason (storable text, at most 1,024 bytes), or None."""
    problem = bounds.storable_problem(value)
    if problem is None and len(value.encode("utf-8")) > bounds.MAX_TEXT_BYTES:
        problem = f"must be at most {bounds.MAX_TEXT_BYTES} bytes of UTF-8, got {len(value.encode('utf-8'))}"
    return problem


def by_problem(value: Any) -> str | None:
    """Say what is wrong with who paused (storable text, at most 150 characters), or None."""
    problem = bounds.storable_problem(value)
    if problem is None and len(value) > MAX_BY_CHARS:
        problem = f"must be at most {MAX_BY_CHARS} characters, got {len(value)}"
    return problem


def check_pause_args(name: Any, reason: Any = "", by: Any = "") -> None:
    """Raise ``ValueError`` naming the argument: the queue by submit's rule, reason and by as above."""
    bounds.check_text(name, "name")
    for label, problem in (("reason", reason_problem(reason)), ("by", by_problem(by))):
        if problem is not None:
            raise ValueError(f"{label} {problem}")


def _model() -> type[QueuePause]:
    # Imported on call: cairnq_django/__init__ imports the client before the app registry is ready.
    from ..models import QueuePause

    return QueuePause


def known_queues() -> set[str]:
    """Queues something uses: a declared task's, ``CAIRNQ["QUEUES"]``, or one with a task, a pause or a live worker."""
    declared = {definition.queue or "default" for definition in registered().values()}
    configured = get_config().get("QUEUES")
    if not isinstance(configured, (list, tuple)):
        configured = []  # check cairnq.E011 reports it
    # The metrics view's reading: one probe per distinct queue of the claim index.
    seen = {item.queue for item in get_store().queue_overview()}
    return declared | {queue for queue in configured if isinstance(queue, str)} | seen


@needs_schema
def unused_queue_problem(name: str) -> str | None:
    """Say that nothing uses queue ``name`` (see ``known_queues``), naming the closest queues in use; else None."""
    known = known_queues()
    if name in known:
        return None
    # Past the reading's first 1,000 queues, a task row still counts.
    # Imported on call: cairnq_django/__init__ imports the client before the app registry is ready.
    from ..models import Task

    if Task.objects.using(get_store().alias).filter(queue=name).exists():
        return None
    close = difflib.get_close_matches(name, sorted(known), n=3)
    suggestion = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
    return f"no declared task, setting, task, pause or live worker uses queue {name!r}{suggestion}"


def pause(name: str, *, reason: str = "", by: str = "") -> tuple[QueuePause, bool]:
    """Pause ``name``; return the pause in force and whether this call made it.

    An existing pause is left exactly as it is (its time, author and reason).
    """
    check_pause_args(name, reason, by)
    store = get_store()
    return _model().objects.using(store.alias).get_or_create(
        queue=name, defaults={"paused_at_ms": store.now_ms(), "paused_by": by, "reason": reason}
    )


@needs_schema
def pause_queue(name: str, *, reason: str = "", by: str = "") -> QueuePause:
    """Stop every worker of this app from starting tasks of queue ``name``.

    Returns the pause in force: this call's, or the earlier one unchanged if
    the queue was already paused. A queue with no tasks may be paused ahead.
    """
    return pause(name, reason=reason, by=by)[0]


@needs_schema
def resume_queue(name: str) -> bool:
    """Let workers start tasks of queue ``name`` again; False if it was not paused."""
    check_pause_args(name)
    store = get_store()
    with transaction.atomic(using=store.alias):
        deleted, _ = _model().objects.using(store.alias).filter(queue=name).delete()
        if deleted and store.dialect == "postgres":
            with connections[store.alias].cursor() as cursor:
                cursor.execute(_NOTIFY_QUEUED, [name])
    return bool(deleted)


@needs_schema
def paused_queues() -> list[QueuePause]:
    """The pauses in force, by queue name: each has ``queue``, ``paused_at``, ``paused_by``, ``reason``."""
    return list(_model().objects.using(get_store().alias).order_by("queue"))
