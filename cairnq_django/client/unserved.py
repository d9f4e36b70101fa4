"""Why a wait timed out, when the worker registry can tell: no live worker serves the task.

A task still queued at a wait's deadline is most often waiting for a worker
nobody started, or one started on other queues or without its handler. After
the deadline, never while polling, the wait asks the registry
(``cairnq_django_worker``) once and adds the answer to ``TaskTimeout``'s
message. The answer only adds words: any failure to read it leaves the
plain message, and the caller's transaction as it was.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from django.db.models import BigIntegerField, Expression

from ..store import get_store

if TYPE_CHECKING:
    from ..models import Task

# Only this app's workers register; the hint says so, since another SDK's may serve the queue.
REGISTRY_NOTE = "(only this app's cairnq_worker processes register)"


class StoreNowMs(Expression):
    """The store's "now" in ms, read by the query that needs it, from the clock the registry rows carry.

    PostgreSQL's rows are stamped by the database's clock; SQLite's writers
    supply the process clock (protocol 2.1), as this does.
    """

    output_field = BigIntegerField()

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[int, ...]]:
        return "%s", (int(time.time() * 1000),)

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, tuple[int, ...]]:
        return "(extract(epoch from clock_timestamp()) * 1000)::bigint", ()


def live_servings(alias: str) -> list[tuple[Sequence[str], Sequence[str]]]:
    """Return ``(queues, names)`` of every live registered worker, in one query.

    The rows not marked stopped are few (housekeeping prunes the gone ones),
    and each carries "now" from the query itself, so the model's own rule
    judges which are live.
    """
    # Imported on call: cairnq_django/__init__ imports the client before the app registry is ready.
    from ..models import Worker, WorkerState

    rows = (
        Worker.objects.using(alias)
        .filter(stopped_at_ms__isnull=True)
        .annotate(now_ms=StoreNowMs())
        .only("queues", "names", "last_seen_at_ms", "heartbeat_interval_ms", "stopped_at_ms")
    )
    return [
        (row.queues or [], row.names or [])
        for row in rows
        if row.state(row.now_ms) == WorkerState.LIVE  # type: ignore[attr-defined]  # the annotation
    ]


def unserved_reason(queue: str, name: str, servings: Sequence[tuple[Sequence[str], Sequence[str]]]) -> str | None:
    """Say what no live worker serves for a task of ``queue`` and ``name``; None when one serves both."""
    names_on_queue = [names for queues, names in servings if queue in queues]
    if any(name in names for names in names_on_queue):
        return None
    if not names_on_queue:
        return (
            f"no live worker serves queue {queue!r}; is `manage.py cairnq_worker --queue {queue}` running? "
            f"{REGISTRY_NOTE}"
        )
    return (
        f"the live workers serving queue {queue!r} have no handler for task {name!r}; is a "
        f"`manage.py cairnq_worker` with that task registered running? {REGISTRY_NOTE}"
    )


def timeout_hint(snapshot: Task | None) -> str | None:
    """The registry's reason a still-queued task was not run, or None (served, not queued, or unknown).

    Never raises. Inside the caller's ``atomic`` block the read runs in a
    savepoint, so a failed query cannot leave that transaction aborted.
    """
    if snapshot is None or snapshot.status != "queued":
        return None
    try:
        alias = get_store().alias
        guard = transaction.atomic(using=alias) if connections[alias].in_atomic_block else contextlib.nullcontext()
        with guard:
            servings = live_servings(alias)
        return unserved_reason(snapshot.queue, snapshot.name, servings)
    except Exception:  # noqa: BLE001 - the hint must never replace the timeout it explains
        return None
