"""The dashboard's failure triage: each queue's top errors of the last hour, from the workers' error counts.

One query over ``cairnq_django_error_minute`` (``queue IN (...)`` and the
hour's minutes, through its unique (queue, minute_ms, ...) index), summed per
(queue, type, message) here; the task table is never read. Each error links
to the task list filtered to it (``client/task_filter.py`` keys), where
"retry all matching" / "cancel all matching" start a bulk operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.db.models import QuerySet

from .throughput import hour_start
from ..models import ErrorMinute

# Errors shown per queue card.
TOP_ERRORS = 5
# Task names listed per error; the rest are counted.
NAMES_SHOWN = 3


@dataclass
class TopError:
    """One error of a queue's last hour: how often it failed a task, and how often it was retried."""

    queue: str
    error_type: str
    message: str
    failed: int = 0
    retried: int = 0
    names: dict[str, int] = field(default_factory=dict)

    @property
    def attempts(self) -> int:
        return self.failed + self.retried

    @property
    def shown_names(self) -> list[str]:
        return sorted(self.names, key=lambda name: (-self.names[name], name))[:NAMES_SHOWN]

    @property
    def more_names(self) -> int:
        return max(0, len(self.names) - NAMES_SHOWN)

    def filter(self, status: str | None = "failed") -> dict[str, str]:
        """The task-list filter selecting this error's tasks (failed ones by default)."""
        spec = {"queue": self.queue, "error_type": self.error_type}
        if self.message:
            spec["error_message"] = self.message
        if status:
            spec["status"] = status
        return spec

    @property
    def query(self) -> str:
        return urlencode(self.filter())


def triage_query(queues: Sequence[str], start_ms: int, alias: str) -> QuerySet[ErrorMinute, tuple[Any, ...]]:
    """The one query the triage costs (kept apart so a test can EXPLAIN it)."""
    return (
        ErrorMinute.objects.using(alias)
        .filter(queue__in=list(queues), minute_ms__gte=start_ms)
        .values_list("queue", "name", "error_type", "message", "failed", "retried")
    )


def top_errors(queues: Sequence[str], now_ms: int, alias: str, limit: int = TOP_ERRORS) -> dict[str, list[TopError]]:
    """Each queue's ``limit`` most frequent errors of the last hour, most failed attempts first."""
    found: dict[tuple[str, str, str], TopError] = {}
    if queues:
        for queue, name, error_type, message, failed, retried in triage_query(queues, hour_start(now_ms), alias):
            key = (queue, error_type, message)
            error = found.get(key)
            if error is None:
                error = found[key] = TopError(queue, error_type, message)
            error.failed += failed
            error.retried += retried
            error.names[name] = error.names.get(name, 0) + failed + retried
    by_queue: dict[str, list[TopError]] = {queue: [] for queue in queues}
    for error in found.values():
        by_queue.setdefault(error.queue, []).append(error)
    return {
        queue: sorted(errors, key=lambda e: (-e.attempts, -e.failed, e.error_type, e.message))[:limit]
        for queue, errors in by_queue.items()
    }
