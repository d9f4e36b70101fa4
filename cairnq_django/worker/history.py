"""The worker's share of the per-minute history the dashboard draws (``cairnq_django_queue_minute``,
and the failed attempts of ``cairnq_django_error_minute`` its triage lists).

Settlements and pickups are counted in memory, per queue and minute, and
added to the table by ``flush``: ONE upsert for everything counted since the
last flush, whatever the number of tasks. The housekeeping thread flushes
every ``FLUSH_INTERVAL_S`` and the worker once more at a clean stop. A flush
the database refuses keeps its counts for the next one (up to
``MAX_PENDING_ROWS`` queue-minutes, the oldest dropped first): the history is
a figure for operators, and settlement never waits for it.

Failed attempts are counted by (queue, minute, task name, error type, short
message) and written by the same flush in a second upsert, kept and bounded
the same way (``MAX_PENDING_ERROR_ROWS``) when the database refuses it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from . import connections as _db
from ..models import ERROR_MESSAGE_CHARS, ERROR_TYPE_CHARS, MINUTE_MS, PICKUP_BUCKETS, SETTLED_COLUMNS

if TYPE_CHECKING:
    from ..store.base import Store

logger = logging.getLogger("cairnq_django.worker")

# Often enough for a dashboard refreshed every few seconds, rare enough to cost nothing.
FLUSH_INTERVAL_S = 5.0
# Queue-minutes held while flushes fail: a day of 7 busy queues.
MAX_PENDING_ROWS = 10_000
# Distinct (queue, minute, name, type, message) counts held while flushes fail.
MAX_PENDING_ERROR_ROWS = 10_000

ErrorKey = tuple[str, int, str, str, str]

COUNT_COLUMNS: tuple[str, ...] = (
    "succeeded",
    "failed",
    "retried",
    "canceled",
    "pickups",
    "pickup_ms_sum",
    *(column for column, _bound in PICKUP_BUCKETS),
)


def minute_of(ms: int) -> int:
    """The start of the minute holding ``ms`` (ms since the epoch)."""
    return ms - ms % MINUTE_MS


def bucket_of(pickup_ms: int) -> str:
    """The bucket column a pickup latency counts in (bounds inclusive)."""
    for column, bound in PICKUP_BUCKETS:
        if bound is None or pickup_ms <= bound:
            return column
    raise AssertionError("the last bucket has no bound")


def short_message(message: str) -> str:
    """The first line of an error message, cut to ``ERROR_MESSAGE_CHARS``: always a prefix of ``message``."""
    return message.split("\n", 1)[0][:ERROR_MESSAGE_CHARS]


def error_of(envelope: Any) -> tuple[str, str] | None:
    """``(type, short message)`` of an error envelope, or None when it carries neither as text."""
    if not isinstance(envelope, dict):
        return None
    kind, message = envelope.get("type"), envelope.get("message")
    kind = kind[:ERROR_TYPE_CHARS] if isinstance(kind, str) else ""
    message = short_message(message) if isinstance(message, str) else ""
    if not kind and not message:
        return None
    return kind, message


def _now_ms() -> int:
    return int(time.time() * 1000)


class QueueHistory:
    """Counts of one worker not yet written; thread-safe (the loop, the settler and housekeeping share it)."""

    def __init__(
        self,
        store: Store,
        *,
        write_lock: Any = None,
        clock: Callable[[], int] = _now_ms,
        max_rows: int = MAX_PENDING_ROWS,
    ) -> None:
        self.store = store
        self.write_lock = write_lock
        self.clock = clock
        self.max_rows = max_rows
        self._counts: dict[tuple[str, int], dict[str, int]] = {}
        # Per error key: [attempts that failed the task, attempts put back for a retry].
        self._errors: dict[ErrorKey, list[int]] = {}
        self.max_error_rows = MAX_PENDING_ERROR_ROWS
        self._lock = threading.Lock()
        self._failing = False
        # Queue-minutes given up while the database refused flushes.
        self.dropped = 0

    def _row(self, queue: str, minute_ms: int) -> dict[str, int]:
        row = self._counts.get((queue, minute_ms))
        if row is None:
            row = self._counts[(queue, minute_ms)] = dict.fromkeys(COUNT_COLUMNS, 0)
        return row

    def started(self, pickups: Iterable[tuple[str, int | None]]) -> None:
        """Count started tasks: ``(queue, pickup_ms)`` each; a None latency (an odd stored time) counts no pickup."""
        minute_ms = minute_of(self.clock())
        with self._lock:
            # One row per queue of the call (a batch call's tasks share theirs).
            rows: dict[str, dict[str, int]] = {}
            for queue, pickup_ms in pickups:
                if pickup_ms is None:
                    continue
                row = rows.get(queue)
                if row is None:
                    row = rows[queue] = self._row(queue, minute_ms)
                row["pickups"] += 1
                row["pickup_ms_sum"] += pickup_ms
                row[bucket_of(pickup_ms)] += 1

    def settled(self, queue: str, status: str) -> None:
        """Count one settlement by the status it left the task in (``queued`` is a retry)."""
        column = SETTLED_COLUMNS.get(status)
        if column is None:
            return
        minute_ms = minute_of(self.clock())
        with self._lock:
            self._row(queue, minute_ms)[column] += 1

    def settled_many(self, counts: dict[tuple[str, str], int]) -> None:
        """Count many settlements at once: how many left each (queue, status); one clock read, one lock."""
        minute_ms = minute_of(self.clock())
        with self._lock:
            for (queue, status), count in counts.items():
                column = SETTLED_COLUMNS.get(status)
                if column is not None:
                    self._row(queue, minute_ms)[column] += count

    def errored(self, queue: str, name: str, envelope: Any, *, terminal: bool) -> None:
        """Count one failed attempt by its error (``terminal``: it left the task failed, else it is retried)."""
        found = error_of(envelope)
        if found is None:
            return
        key = (queue, minute_of(self.clock()), name, *found)
        with self._lock:
            counts = self._errors.setdefault(key, [0, 0])
            counts[0 if terminal else 1] += 1

    @property
    def pending_errors(self) -> int:
        with self._lock:
            return len(self._errors)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._counts)

    def flush(self) -> bool:
        """Add what was counted to the tables, one statement each; True unless the database refused one."""
        with self._lock:
            taken, self._counts = self._counts, {}
            errors, self._errors = self._errors, {}
        ok = True
        if taken:
            rows = [{"queue": queue, "minute_ms": minute_ms, **counts} for (queue, minute_ms), counts in taken.items()]
            if not self._write(self.store.add_queue_minutes, rows):
                self._restore(taken)
                ok = False
        if errors:
            error_rows = [
                {"queue": queue, "minute_ms": minute_ms, "name": name, "error_type": kind, "message": message,
                 "failed": failed, "retried": retried}
                for (queue, minute_ms, name, kind, message), (failed, retried) in errors.items()
            ]
            if not self._write(self.store.add_error_minutes, error_rows):
                self._restore_errors(errors)
                ok = False
        if ok and self._failing and (taken or errors):
            logger.info("per-minute history written again")
            self._failing = False
        return ok

    def _write(self, write: Callable[[list[dict[str, Any]]], None], rows: list[dict[str, Any]]) -> bool:
        try:
            if self.write_lock is None:
                write(rows)
            else:
                with self.write_lock:
                    write(rows)
        except Exception as exc:  # noqa: BLE001 - kept for the next flush
            _db.close_quietly(self.store.alias)
            if not self._failing:
                logger.error("writing the per-minute history failed, keeping the counts: %s", exc)
            self._failing = True
            return False
        return True

    def _restore_errors(self, taken: dict[ErrorKey, list[int]]) -> None:
        """Put error counts a failed flush took back, keeping at most ``max_error_rows`` (the newest minutes)."""
        with self._lock:
            for key, (failed, retried) in taken.items():
                counts = self._errors.setdefault(key, [0, 0])
                counts[0] += failed
                counts[1] += retried
            excess = len(self._errors) - self.max_error_rows
            if excess > 0:
                for key in sorted(self._errors, key=lambda item: item[1])[:excess]:
                    del self._errors[key]
                self.dropped += excess
                logger.warning("per-minute history: dropped %d unwritten error count(s)", excess)

    def _restore(self, taken: dict[tuple[str, int], dict[str, int]]) -> None:
        """Put counts a failed flush took back, keeping at most ``max_rows`` queue-minutes (the newest)."""
        with self._lock:
            for key, counts in taken.items():
                row = self._row(*key)
                for column, value in counts.items():
                    row[column] += value
            excess = len(self._counts) - self.max_rows
            if excess > 0:
                for key in sorted(self._counts, key=lambda item: item[1])[:excess]:
                    del self._counts[key]
                self.dropped += excess
                logger.warning("per-minute history: dropped %d unwritten queue-minute(s)", excess)
