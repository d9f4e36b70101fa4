"""Pin how large payloads travel (fault plan F15): a claim returns small payloads
inline and leaves one over 256 KiB in the database, with its size; the handler
still receives the whole decoded payload, fetched by id on first use (sync,
async and batch handlers alike), and the worker forgets it when the call ends.

The large payload here is multi-byte text longer than one PostgreSQL read slice
(1 MiB), so slices split characters and must be joined as bytes.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import cairnq_django as cq
from cairnq_django.conf import get_config
from cairnq_django.worker.attempt import Attempt, AttemptOwner
from cairnq_django.exceptions import LostLease
from cairnq_django.models import Task
from cairnq_django.protocol.payload import byte_size
from cairnq_django.store.rows import PAYLOAD_BYTES

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 8 << 20
# 9 UTF-8 bytes per unit: about 2.7 MB, three PostgreSQL slices.
BIG = {"blob": "ä€😀" * 300_000, "n": 1}
SMALL = {"blob": "small", "n": 2}


def _submit(name: str, payload: dict[str, Any]) -> str:
    with override_settings(CAIRNQ={**get_config(), "MAX_PAYLOAD_BYTES": LIMIT}):
        return cq.submit(name, payload).id


def _claim_both(store: Any) -> tuple[Task, Task]:
    big_id, small_id = _submit("demo.noop", BIG), _submit("demo.noop", SMALL)
    rows = {row.id: row for row in store.claim(["default"], "w1", limit=2)}
    return rows[big_id], rows[small_id]


def test_claim_returns_small_payloads_and_sizes_of_large_ones(store: Any) -> None:
    big, small = _claim_both(store)
    assert small.__dict__["payload"] == SMALL and PAYLOAD_BYTES not in small.__dict__
    assert "payload" not in big.__dict__
    # PostgreSQL measures its own rendering of the JSON (a space after ":"
    # and ","), SQLite the stored compact text.
    assert abs(big.__dict__[PAYLOAD_BYTES] - byte_size(BIG)) <= 4
    assert store.get_payload(big.id) == BIG
    # Code that reads the model field directly still gets it (Django's deferred load).
    assert big.payload == BIG
    with pytest.raises(LostLease):
        store.get_payload("task_missing")


def _deferred(task: Task) -> bool:
    return "payload" not in task.__dict__ and task.__dict__.get(PAYLOAD_BYTES, 0) > 262_144


def test_every_write_that_answers_with_a_row_leaves_a_large_payload_behind(store: Any) -> None:
    # Renewal, progress, settlement, cancel and retry answer with the task:
    # with its payload's size when large, never the payload itself.
    big, small = _claim_both(store)
    assert _deferred(store.heartbeat(big.id, "w1", 30_000))
    assert _deferred(store.progress(big.id, "w1", 0.5, "half"))
    error = {"type": "Boom", "code": "handler_error", "message": "boom", "retryable": False, "details": {}}
    failed = store.fail(big.id, "w1", error, retryable=False)
    assert failed.status == "failed" and _deferred(failed)
    assert failed.payload == BIG  # read on demand
    assert store.complete(small.id, "w1", None).__dict__["payload"] == SMALL
    retried = store.retry(big.id)
    assert retried is not None and retried.status == "queued" and _deferred(retried)
    [again] = store.claim(["default"], "w2", limit=1)
    assert _deferred(store.succeed(again.id, "w2", None))
    queued = store.get(_submit("demo.noop", BIG))
    assert queued is not None
    canceled = store.cancel(queued.id)
    assert canceled is not None and canceled.status == "canceled" and _deferred(canceled)
    assert [_deferred(t) for t in store.retry_many([queued.id])] == [True]
    assert [_deferred(t) for t in store.cancel_many([queued.id])] == [True]


def test_context_fetches_on_first_use_and_forgets_after(store: Any) -> None:
    big, small = _claim_both(store)
    owner = AttemptOwner(store, "w1", 30_000)
    big_attempt, small_attempt = Attempt(big, owner), Attempt(small, owner)
    big_ctx, small_ctx = big_attempt.context, small_attempt.context
    # The byte budget is charged from the claim's figure, without a fetch.
    assert big_attempt.payload_bytes() == big.__dict__[PAYLOAD_BYTES]
    assert big_attempt.payload_deferred and not small_attempt.payload_deferred
    assert big_ctx.payload == BIG and not big_attempt.payload_deferred
    big_attempt.drop_payload()
    assert big_attempt.payload_deferred
    assert big_ctx.payload == BIG  # fetched again
    # An inline payload costs no query and is kept.
    with CaptureQueriesContext(connection) as queries:
        assert small_ctx.payload == SMALL
        small_attempt.drop_payload()
        assert small_ctx.payload == SMALL
    assert len(queries) == 0


def test_context_loses_the_lease_when_the_row_is_gone(store: Any) -> None:
    big, _ = _claim_both(store)
    ctx = Attempt(big, AttemptOwner(store, "w1", 30_000)).context
    Task.objects.filter(id=big.id).delete()
    with pytest.raises(LostLease):
        ctx.payload  # noqa: B018 - the access is the test
    assert ctx.lost_lease


def test_worker_hands_every_kind_of_handler_the_whole_payload(cairnq_db: Any, start_worker: Any) -> None:
    sync_id = _submit("faults.echo", BIG)
    async_id = _submit("demo.async_echo", {"value": BIG})
    batch_ids = [_submit("demo.echo_batch", {"value": BIG}), _submit("demo.echo_batch", {"value": SMALL})]
    worker = start_worker("--burst", overrides={"MAX_IN_FLIGHT_BYTES": 1 << 20, "CONCURRENCY": 2})
    assert worker.wait(60) == 0, worker.output()[-3000:]
    rows = {row.id: row for row in Task.objects.all()}
    assert {row.status for row in rows.values()} == {"succeeded"}, worker.output()[-3000:]
    assert rows[sync_id].result == {"size": len(BIG["blob"])}
    assert rows[async_id].result == {"echo": {"value": BIG}}
    assert [rows[task_id].result for task_id in batch_ids] == [BIG, SMALL]
