"""The queue gauges the metrics view exports: one reading of the queue database, rendered.

A reading is one statement, ``Store.queue_overview``: per queue its queued
and running tasks, how long its earliest-due task has waited and whether it
is paused and how many live workers serve it, through the claim index and
the worker registry (terminal rows are never read, so
their totals are not exported: ``cairnq_stats`` and the dashboard count
them). ``reading_cache`` keeps it to one reading per second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..store import get_store
from . import text_format

if TYPE_CHECKING:
    from ..store import QueueOverview


def read_queues() -> list[QueueOverview]:
    return get_store().queue_overview()


def render(queues: list[QueueOverview]) -> str:
    """The reading as Prometheus text: every known queue gets every gauge (0 rather than no series)."""
    return "".join(
        (
            text_format.gauge(
                "cairnq_queue_tasks",
                "Live tasks (queued, running) in the queue database, by queue and status.",
                (
                    ({"queue": item.queue, "status": status}, count)
                    for item in queues
                    for status, count in (("queued", item.queued), ("running", item.running))
                ),
            ),
            text_format.gauge(
                "cairnq_queue_oldest_due_age_seconds",
                "How long the earliest-due queued task of the queue has been due (0: none is due).",
                (({"queue": item.queue}, (item.due_age_ms or 0) / 1000) for item in queues),
            ),
            text_format.gauge(
                "cairnq_queue_paused",
                "1 while the queue is paused (cairnq.pause_queue), else 0.",
                (({"queue": item.queue}, 1 if item.paused else 0) for item in queues),
            ),
            text_format.gauge(
                "cairnq_queue_live_workers",
                "Registered cairnq_worker processes serving the queue that refreshed within three heartbeats.",
                (({"queue": item.queue}, item.live_workers) for item in queues),
            ),
        )
    )
