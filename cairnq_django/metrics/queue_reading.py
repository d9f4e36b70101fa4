"""The queue gauges the metrics view exports: one reading of the queue database, rendered.

A reading is three statements: the per-queue, per-status counts
(``Store.stats``, the dashboard's grouped read), how long each queue's
earliest-due task has been due (``Store.oldest_due``, index probes only) and
the pauses in force. ``reading_cache`` keeps it to one reading per second.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..client import pauses
from ..models import TaskStatus
from ..store import get_store
from . import text_format


@dataclass(frozen=True)
class QueueReading:
    """What the database said: counts by queue and status, due ages, paused queues."""

    counts: dict[str, dict[str, int]]
    oldest_due_ms: dict[str, int]
    paused: frozenset[str]

    @property
    def queues(self) -> list[str]:
        """Every queue with a task or a pause, in name order."""
        return sorted(set(self.counts) | self.paused)


def read_queues() -> QueueReading:
    store = get_store()
    counts = store.stats()
    waiting = [queue for queue, by_status in counts.items() if by_status.get(TaskStatus.QUEUED, 0) > 0]
    return QueueReading(
        counts=counts,
        oldest_due_ms=store.oldest_due(waiting),
        paused=frozenset(pause.queue for pause in pauses.paused_queues()),
    )


def render(reading: QueueReading) -> str:
    """The reading as Prometheus text: every known queue gets every gauge (0 rather than no series)."""
    queues = reading.queues
    statuses = list(TaskStatus.values)
    return "".join(
        (
            text_format.gauge(
                "cairnq_queue_tasks",
                "Tasks in the queue database, by queue and status.",
                (
                    ({"queue": queue, "status": status}, reading.counts.get(queue, {}).get(status, 0))
                    for queue in queues
                    for status in statuses
                ),
            ),
            text_format.gauge(
                "cairnq_queue_oldest_due_age_seconds",
                "How long the earliest-due queued task of the queue has been due (0: none is due).",
                (({"queue": queue}, reading.oldest_due_ms.get(queue, 0) / 1000) for queue in queues),
            ),
            text_format.gauge(
                "cairnq_queue_paused",
                "1 while the queue is paused (cairnq.pause_queue), else 0.",
                (({"queue": queue}, 1 if queue in reading.paused else 0) for queue in queues),
            ),
        )
    )
