"""``Store.snooze_many``: owned tasks come back in their own delay and the attempt does not count.

Pins: a snoozed row that keeps its attempt (``max_attempts`` would then end a
task that only waited), keeps its lease, owner or progress, comes back before
its delay, or lets a cancel requested meanwhile be lost; a snooze written onto
a row this worker no longer owns (another worker's, an expired lease, one
already settled); a bad delay writing anything; a batch that falls back to one
statement per task. In both of SQLite's write modes.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cairnq_django.models import Task
from cairnq_django.protocol import payload
from cairnq_django.protocol.bounds import MAX_DELAY_MS
from cairnq_django.store.base import Store, SubmitSpec

# One statement; in SQLite's large-row mode a pick, the write and a read inside BEGIN ... COMMIT.
STATEMENTS = {"returning": 1, "large_rows": 5}


def submit(store: Store, **kwargs: Any) -> str:
    return store.submit(SubmitSpec(name="job", payload_json=payload.encode_object({}), **kwargs)).id


def fresh(store: Store, task_id: str) -> Task:
    row = store.get(task_id)
    assert row is not None
    return row


def claim(store: Store, n: int, worker: str = "w1", **kwargs: Any) -> list[Task]:
    rows = store.claim(["default"], worker, limit=n, **kwargs)
    assert len(rows) == n
    return rows


def test_each_row_comes_back_in_its_delay_without_counting_the_attempt(store: Store, write_mode: str) -> None:
    later = submit(store, priority=6)
    now = submit(store, priority=5)
    canceled = submit(store, priority=4)
    settled = submit(store, priority=3)
    foreign = submit(store, priority=2)
    claim(store, 4, "w1")
    claim(store, 1, "w2")
    store.progress(later, "w1", 0.5, "half way")
    store.progress(canceled, "w1", 0.25, "kept")
    store.cancel(canceled)
    store.complete(settled, "w1", None)
    before = store.now_ms()
    snoozes = [(later, 60_000), (now, 0), (canceled, 60_000), (settled, 1), (foreign, 1), ("task_unknown", 1)]
    with CaptureQueriesContext(connection) as queries:
        answer = store.snooze_many("w1", snoozes)
    assert len(queries.captured_queries) == STATEMENTS[write_mode]
    assert answer == {later: "queued", now: "queued", canceled: "canceled"}

    row = fresh(store, later)
    assert (row.status, row.attempt, row.worker_id, row.lease_until_ms) == ("queued", 0, None, None)
    assert (row.progress, row.message, row.completed_at_ms, row.error) == (None, None, None, None)
    assert before + 60_000 <= row.run_at_ms <= store.now_ms() + 60_000
    row = fresh(store, canceled)  # cancel wins, as on every way out of running
    assert (row.status, row.attempt, row.worker_id, row.lease_until_ms) == ("canceled", 1, "w1", None)
    assert (row.progress, row.message) == (0.25, "kept") and row.completed_at_ms is not None
    assert fresh(store, settled).status == "succeeded"
    row = fresh(store, foreign)
    assert (row.status, row.worker_id, row.attempt) == ("running", "w2", 1)

    # Due now: claimable again at once, as the same attempt number; the other waits.
    again = store.claim(["default"], "w3", limit=10)
    assert [(r.id, r.attempt) for r in again] == [(now, 1)]
    assert store.snooze_many("w1", []) == {}


def test_an_expired_lease_is_not_snoozed(store: Store) -> None:
    task_id = submit(store)
    claim(store, 1, "w1", lease_ms=1)
    time.sleep(0.01)
    assert store.snooze_many("w1", [(task_id, 0)]) == {}
    row = fresh(store, task_id)
    assert (row.status, row.attempt, row.worker_id) == ("running", 1, "w1")


def test_max_attempts_bounds_only_attempts_that_end(store: Store) -> None:
    task_id = submit(store, max_attempts=1)
    for _ in range(5):
        (row,) = claim(store, 1)
        assert row.attempt == 1
        assert store.snooze_many("w1", [(task_id, 0)]) == {task_id: "queued"}
    (row,) = claim(store, 1)
    assert row.attempt == 1
    assert store.complete(task_id, "w1", payload.encode("sixth run")).status == "succeeded"
    assert fresh(store, task_id).result == "sixth run"


@pytest.mark.parametrize("delay", [-1, MAX_DELAY_MS + 1, 1.5, True, "10", None])
def test_a_bad_delay_is_refused_and_nothing_is_written(store: Store, delay: Any) -> None:
    good = submit(store)
    bad = submit(store)
    claim(store, 2)
    with pytest.raises(ValueError, match="delay_ms"):
        store.snooze_many("w1", [(good, 0), (bad, delay)])
    assert {fresh(store, task_id).status for task_id in (good, bad)} == {"running"}
