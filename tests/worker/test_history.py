"""Pin the per-minute history workers keep in ``cairnq_django_queue_minute``.

Real worker subprocesses count what they settle and start, and write it with
one upsert per flush that adds to the row other workers write; a flush the
database refuses keeps its counts (bounded); the housekeeping thread deletes
minutes older than ``HISTORY_KEEP_MS``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import cairnq_django as cq
from cairnq_django.models import PICKUP_BUCKETS, QueueMinute, Task
from cairnq_django.worker.history import (
    COUNT_COLUMNS,
    FLUSH_INTERVAL_S,
    MINUTE_MS,
    QueueHistory,
    bucket_of,
    minute_of,
)

from .conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BUCKETS = [column for column, _bound in PICKUP_BUCKETS]
# A launcher whose worker flushes its history every $FLUSH_INTERVAL_S seconds.
QUICK_FLUSH_WORKER = str(Path(__file__).with_name("_quick_flush_worker.py"))


def totals(queue: str) -> dict[str, int]:
    rows = QueueMinute.objects.filter(queue=queue)
    return {column: sum(getattr(row, column) for row in rows) for column in COUNT_COLUMNS}


def test_buckets_and_minutes() -> None:
    assert bucket_of(0) == "pickup_le_10ms"
    assert bucket_of(10) == "pickup_le_10ms"
    assert bucket_of(11) == "pickup_le_50ms"
    assert bucket_of(120_000) == "pickup_le_2min"
    assert bucket_of(120_001) == "pickup_slower"
    assert minute_of(1_700_000_099_999) == 1_700_000_040_000
    assert minute_of(1_700_000_040_000) == 1_700_000_040_000


def test_a_worker_counts_what_it_ran(cairnq_db: Any, start_worker: Any) -> None:
    for _ in range(3):
        cq.submit("demo.noop", {}, queue="hist")
    for _ in range(2):
        cq.submit("demo.crash", {}, queue="hist", max_attempts=1)
    # Fails once (a retry), then succeeds: two attempts, two pickups.
    cq.submit("demo.flaky", {"fail_times": 1}, queue="hist", max_attempts=2)
    cq.submit("demo.noop", {}, queue="other")
    worker = start_worker("--queue", "hist", "--queue", "other", "--burst", overrides={"RETRY_BACKOFF_MS": 1})
    assert worker.wait() == 0, worker.output()[-3000:]
    assert Task.objects.filter(queue="hist", status="succeeded").count() == 4

    counts = totals("hist")
    assert (counts["succeeded"], counts["failed"], counts["retried"], counts["canceled"]) == (4, 2, 1, 0)
    assert counts["pickups"] == 7
    assert sum(counts[column] for column in BUCKETS) == 7
    assert counts["pickup_ms_sum"] >= 0
    assert totals("other")["succeeded"] == 1
    # Every row is one minute's: its start, and unique per queue.
    for row in QueueMinute.objects.all():
        assert row.minute_ms % MINUTE_MS == 0
        assert abs(row.minute_ms - time.time() * 1000) < 10 * MINUTE_MS


def test_two_workers_add_to_the_same_minute(cairnq_db: Any, start_worker: Any) -> None:
    for _ in range(6):
        cq.submit("demo.noop", {}, queue="shared")
    first = start_worker("--queue", "shared", "--max-tasks", "3")
    assert first.wait() == 0, first.output()[-3000:]
    second = start_worker("--queue", "shared", "--burst")
    assert second.wait() == 0, second.output()[-3000:]
    assert totals("shared")["succeeded"] == 6
    # Both flushes landed in at most two minutes (the test may straddle a minute's end).
    assert 1 <= QueueMinute.objects.filter(queue="shared").count() <= 2


def test_a_running_worker_flushes_within_seconds(cairnq_db: Any, start_worker: Any) -> None:
    # The housekeeping thread flushes every FLUSH_INTERVAL_S while the worker
    # runs, not only at its stop. This worker's launcher sets the period to
    # 0.3 s so the test does not wait it out; that the period is seconds
    # (docs/admin.md: "every 5 seconds") is pinned here instead.
    assert FLUSH_INTERVAL_S <= 5.0
    worker = start_worker("--queue", "live", script=QUICK_FLUSH_WORKER, env={"FLUSH_INTERVAL_S": "0.3"})
    cq.submit("demo.noop", {}, queue="live")
    wait_until(lambda: totals("live")["succeeded"] == 1, 20, what="flushed while running")
    assert worker.alive(), worker.output()[-3000:]


def test_one_upsert_per_flush(cairnq_db: Any, store: Any) -> None:
    history = QueueHistory(store)
    history.started([("a", 5)] * 50 + [("b", 700)] * 20 + [("b", None)])
    for _ in range(40):
        history.settled("a", "succeeded")
    history.settled("b", "failed")
    history.settled("b", "queued")
    history.settled("b", "canceled")
    history.settled("b", "running")  # not a settlement: not counted
    with CaptureQueriesContext(connection) as queries:
        assert history.flush()
    assert len(queries) == 1, [query["sql"] for query in queries]
    assert "cairnq_django_queue_minute" in queries[0]["sql"]
    # Nothing counted since: no statement at all.
    with CaptureQueriesContext(connection) as queries:
        assert history.flush()
    assert len(queries) == 0
    # A second flush adds to the same row.
    history.settled("a", "succeeded")
    history.started([("a", 20)])
    assert history.flush()
    a, b = totals("a"), totals("b")
    assert (a["succeeded"], a["pickups"], a["pickup_ms_sum"]) == (41, 51, 270)
    assert (a["pickup_le_10ms"], a["pickup_le_50ms"]) == (50, 1)
    assert (b["failed"], b["retried"], b["canceled"], b["pickups"], b["pickup_le_1s"]) == (1, 1, 1, 20, 20)


def test_a_refused_flush_keeps_its_counts_bounded(cairnq_db: Any, store: Any) -> None:
    minute = [0]
    history = QueueHistory(store, clock=lambda: minute[0] * MINUTE_MS, max_rows=3)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE cairnq_django_queue_minute RENAME TO cairnq_django_queue_minute_away")
    try:
        for minute[0] in range(5):
            history.settled("q", "succeeded")
            assert not history.flush()
        # Five minutes counted, three kept: the oldest went first.
        assert history.pending == 3
        assert history.dropped == 2
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE cairnq_django_queue_minute_away RENAME TO cairnq_django_queue_minute")
    history.settled("q", "succeeded")  # minute 4 again
    assert history.flush()
    rows = {row.minute_ms // MINUTE_MS: row.succeeded for row in QueueMinute.objects.filter(queue="q")}
    assert rows == {2: 1, 3: 1, 4: 2}


def test_the_worker_prunes_old_minutes(cairnq_db: Any, start_worker: Any) -> None:
    now = minute_of(int(time.time() * 1000))
    old = QueueMinute.objects.create(queue="q", minute_ms=now - 2 * 86_400_000, succeeded=1)
    recent = QueueMinute.objects.create(queue="q", minute_ms=now - 3_600_000, succeeded=1)
    start_worker("--queue", "q", overrides={"HISTORY_KEEP_MS": 86_400_000})
    wait_until(lambda: not QueueMinute.objects.filter(pk=old.pk).exists(), 20, what="old minute pruned")
    assert QueueMinute.objects.filter(pk=recent.pk).exists()


def test_history_keep_none_keeps_everything(cairnq_db: Any, start_worker: Any) -> None:
    old = QueueMinute.objects.create(queue="q", minute_ms=0, succeeded=1)
    cq.submit("demo.noop", {}, queue="q")
    worker = start_worker("--queue", "q", "--burst", overrides={"HISTORY_KEEP_MS": None})
    assert worker.wait() == 0, worker.output()[-3000:]
    assert QueueMinute.objects.filter(pk=old.pk).exists()
    assert totals("q")["succeeded"] == 2


def test_settled_many_counts_as_one_settled_call_per_task(cairnq_db: Any, store: Any) -> None:
    one_by_one, at_once = QueueHistory(store, clock=lambda: 5 * MINUTE_MS), QueueHistory(store, clock=lambda: 5 * MINUTE_MS)
    settlements = [("a", "succeeded")] * 30 + [("b", "failed")] * 2 + [("b", "queued"), ("b", "running")]
    for queue, status in settlements:
        one_by_one.settled(queue, status)
    counts: dict[tuple[str, str], int] = {}
    for key in settlements:
        counts[key] = counts.get(key, 0) + 1
    at_once.settled_many(counts)
    assert at_once._counts == one_by_one._counts
    assert at_once._counts[("a", 5 * MINUTE_MS)]["succeeded"] == 30
    assert at_once._counts[("b", 5 * MINUTE_MS)]["failed"] == 2
