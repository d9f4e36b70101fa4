"""The dashboard's last hour per queue, read from the workers' per-minute history.

One query over ``cairnq_django_queue_minute`` (``queue IN (...)`` and the
hour's minutes, through its unique (queue, minute_ms) index); the task table
is never read here. Pickup percentiles are estimated from the fixed buckets:
each is reported as the upper bound of the bucket it falls in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

from ..models import MINUTE_MS, PICKUP_BUCKETS, QueueMinute

HISTORY_MINUTES = 60


@dataclass
class QueueHour:
    """One queue's last hour: per-minute succeeded and failed (oldest first) and its pickups."""

    start_ms: int
    succeeded: list[int] = field(default_factory=lambda: [0] * HISTORY_MINUTES)
    failed: list[int] = field(default_factory=lambda: [0] * HISTORY_MINUTES)
    retried: int = 0
    pickups: int = 0
    pickup_ms_sum: int = 0
    buckets: dict[str, int] = field(default_factory=lambda: {column: 0 for column, _bound in PICKUP_BUCKETS})

    @property
    def total_succeeded(self) -> int:
        return sum(self.succeeded)

    @property
    def total_failed(self) -> int:
        return sum(self.failed)

    def pickup_quantile(self, q: float) -> tuple[str, int | None] | None:
        """``("le", bound)`` for the bucket holding quantile ``q``, ``("gt", last bound)`` past them; None without pickups."""
        if self.pickups <= 0:
            return None
        rank = q * self.pickups
        seen = 0
        last_bound = 0
        for column, bound in PICKUP_BUCKETS:
            seen += self.buckets[column]
            if bound is None:
                return ("gt", last_bound)
            if seen >= rank:
                return ("le", bound)
            last_bound = bound
        return ("gt", last_bound)

    @property
    def pickup_mean_ms(self) -> int | None:
        return None if self.pickups <= 0 else round(self.pickup_ms_sum / self.pickups)


def hour_start(now_ms: int) -> int:
    """The first minute of the 60 shown: the current minute is the last."""
    return now_ms - now_ms % MINUTE_MS - (HISTORY_MINUTES - 1) * MINUTE_MS


def history_query(queues: Sequence[str], start_ms: int, alias: str) -> QuerySet[QueueMinute, tuple[Any, ...]]:
    """The one query the dashboard's history costs (kept apart so a test can EXPLAIN it)."""
    columns = ["queue", "minute_ms", "succeeded", "failed", "retried", "pickups", "pickup_ms_sum"]
    columns += [column for column, _bound in PICKUP_BUCKETS]
    return QueueMinute.objects.using(alias).filter(queue__in=list(queues), minute_ms__gte=start_ms).values_list(*columns)


def last_hour(queues: Sequence[str], now_ms: int, alias: str) -> dict[str, QueueHour]:
    """Return each queue's last hour (a queue without history gets zeros)."""
    start_ms = hour_start(now_ms)
    hours = {queue: QueueHour(start_ms) for queue in queues}
    if not queues:
        return hours
    bucket_columns = [column for column, _bound in PICKUP_BUCKETS]
    for queue, minute_ms, succeeded, failed, retried, pickups, pickup_sum, *buckets in history_query(
        queues, start_ms, alias
    ):
        slot = (minute_ms - start_ms) // MINUTE_MS
        hour = hours.get(queue)
        if hour is None or not 0 <= slot < HISTORY_MINUTES:
            continue  # a minute ahead of this clock (another host's): not drawn
        hour.succeeded[slot] += succeeded
        hour.failed[slot] += failed
        hour.retried += retried
        hour.pickups += pickups
        hour.pickup_ms_sum += pickup_sum
        for column, count in zip(bucket_columns, buckets):
            hour.buckets[column] += count
    return hours


def duration_text(ms: int) -> str:
    """``850 ms``, ``5 s``, ``2 min``: the buckets' bounds and a mean, short."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:g} s"
    return f"{ms / 60_000:g} min"


def quantile_text(hour: QueueHour, q: float) -> str:
    """``≤ 50 ms`` / ``> 2 min``, or "—" without pickups."""
    found = hour.pickup_quantile(q)
    if found is None:
        return "—"
    relation, bound = found
    return f"{'≤' if relation == 'le' else '>'} {duration_text(bound or 0)}"
