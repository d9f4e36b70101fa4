"""The worker registry, read: ``workers()``.

Each ``cairnq_worker`` process keeps a row of ``cairnq_django_worker`` fresh
with its heartbeat (``worker/presence.py``); this module answers "which
workers are there, and what do they serve" from those rows. A worker is
*live* while its row was refreshed within three of its heartbeat intervals,
*lost* after that (killed, hung or cut off), *stopped* once it stopped
cleanly. "Now" is the store's clock (the database's on PostgreSQL), the one
the rows were stamped with.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..store import get_store
from .schema_guard import needs_schema

if TYPE_CHECKING:
    from ..models import Worker


@dataclass(frozen=True)
class WorkerInfo:
    """One registered worker as of its last refresh; ``state`` is live, lost or stopped."""

    id: str
    state: str
    host: str
    pid: int
    queues: tuple[str, ...]
    names: tuple[str, ...]
    concurrency: int
    resources: Mapping[str, int]
    global_resources: Mapping[str, int]
    version: str
    heartbeat_interval_ms: int
    started_at: dt.datetime
    last_seen_at: dt.datetime
    stopped_at: dt.datetime | None
    in_flight: int
    succeeded: int
    failed: int
    per_minute: float

    def as_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict (times as ISO 8601 text)."""
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            if isinstance(value, dt.datetime):
                value = value.isoformat()
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Mapping):
                value = dict(value)
            out[key] = value
        return out


def _time(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)


def _model() -> type[Worker]:
    # Imported on call: cairnq_django/__init__ imports the client before the app registry is ready.
    from ..models import Worker

    return Worker


def info(row: Worker, now_ms: int) -> WorkerInfo:
    """Return ``row`` as a ``WorkerInfo``, its state as of ``now_ms``."""
    return WorkerInfo(
        id=row.id,
        state=str(row.state(now_ms)),
        host=row.host,
        pid=row.pid,
        queues=tuple(row.queues or ()),
        names=tuple(row.names or ()),
        concurrency=row.concurrency,
        resources=dict(row.resources or {}),
        global_resources=dict(row.global_resources or {}),
        version=row.version,
        heartbeat_interval_ms=row.heartbeat_interval_ms,
        started_at=_time(row.started_at_ms),
        last_seen_at=_time(row.last_seen_at_ms),
        stopped_at=None if row.stopped_at_ms is None else _time(row.stopped_at_ms),
        in_flight=row.in_flight,
        succeeded=row.succeeded,
        failed=row.failed,
        per_minute=row.per_minute,
    )


@needs_schema
def workers(*, include_lost: bool = False, include_stopped: bool = False) -> list[WorkerInfo]:
    """Return the registered workers, live ones only unless asked for lost and stopped ones too.

    Ordered by start time, oldest first. Rows of workers gone for
    ``CAIRNQ["WORKER_KEEP_MS"]`` are pruned and no longer listed.
    """
    store = get_store()
    now_ms = store.now_ms()
    wanted = ["live"] + (["lost"] if include_lost else []) + (["stopped"] if include_stopped else [])
    rows = _model().objects.using(store.alias).with_state(now_ms).in_states(wanted)
    return [info(row, now_ms) for row in rows.order_by("started_at_ms", "id")]
