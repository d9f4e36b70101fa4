"""Batched store operations and the store's edges beyond the checklist.

Pins: a batched settlement that writes one row's outcome onto another, lets a
lost or cancel-requested row through, or quietly falls back to one statement
per task (issue 7's throughput ceiling); ``release`` counting the handed-back
attempt; ``submit_many`` breaking a key rule or leaving half a batch behind;
names and keys with SQL metacharacters being treated as SQL; a submit escaping
the caller's transaction; SQLite contention surfacing as an instant error;
a PostgreSQL keyed operation not excluding upstream's key lock.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
import time
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext, override_settings

from cairnq_django.protocol import payload
from cairnq_django.exceptions import AlreadyExists, LostLease
from cairnq_django.models import Task
from cairnq_django.store import get_store
from cairnq_django.store.sql_store import INSERT_CHUNK
from cairnq_django.store.base import ClaimRequest, Failure, Store, SubmitSpec

ENVELOPE = {"type": "Boom", "code": "handler_error", "message": "boom", "retryable": True, "details": {}}


def spec(name: str = "job", value: Any = None, **kwargs: Any) -> SubmitSpec:
    return SubmitSpec(name=name, payload_json=payload.encode_object(value), **kwargs)


def submit(store: Store, name: str = "job", **kwargs: Any) -> Task:
    return store.submit(spec(name, **kwargs))


def fresh(store: Store, task_id: str) -> Task:
    row = store.get(task_id)
    assert row is not None
    return row


def claim_all(store: Store, n: int, worker: str = "w1", **kwargs: Any) -> list[Task]:
    rows = store.claim(["default"], worker, limit=n, **kwargs)
    assert len(rows) == n
    return rows


# Statements a batch write takes: one; in SQLite's large-row mode a pick, the
# write and (settlement) a read, inside BEGIN ... COMMIT.
STATEMENTS = {
    "returning": {"settle": 1, "renew": 1},
    "large_rows": {"settle": 5, "renew": 4},
}


def statements_during(fn: Any) -> tuple[Any, int]:
    with CaptureQueriesContext(connection) as ctx:
        out = fn()
    return out, len(ctx.captured_queries)


def test_complete_many_mixed_rows_one_statement(store: Store, write_mode: str) -> None:
    ids = [submit(store, priority=p).id for p in (5, 4, 3, 2)]
    owned, canceled, foreign, settled = ids
    claim_all(store, 2, "w1")  # owned, canceled
    claim_all(store, 1, "w2")  # foreign
    claim_all(store, 1, "w1")  # settled
    store.cancel(canceled)
    store.complete(settled, "w1", None)
    results = [
        (owned, payload.encode({"own": 1})),
        (canceled, payload.encode({"own": 2})),
        (foreign, payload.encode({"own": 3})),
        (settled, payload.encode({"own": 4})),
        ("task_unknown", None),
    ]
    answer, count = statements_during(lambda: store.complete_many("w1", results))
    assert count == STATEMENTS[write_mode]["settle"]
    assert answer == {owned: "succeeded", canceled: "canceled"}
    row = fresh(store, owned)
    assert (row.result, row.progress, row.lease_until_ms) == ({"own": 1}, 1.0, None)
    row = fresh(store, canceled)
    assert row.result is None and row.lease_until_ms is None and row.completed_at_ms is not None
    row = fresh(store, foreign)
    assert row.status == "running" and row.worker_id == "w2" and row.result is None
    assert fresh(store, settled).result is None
    assert store.complete_many("w1", []) == {}


def test_fail_many_each_row_keeps_its_outcome(store: Store, write_mode: str) -> None:
    retry = submit(store, priority=6, max_attempts=3).id
    permanent = submit(store, priority=5, max_attempts=3).id
    last = submit(store, priority=4, max_attempts=1).id
    canceled = submit(store, priority=3, max_attempts=3).id
    foreign = submit(store, priority=2).id
    claim_all(store, 4, "w1")
    claim_all(store, 1, "w2")
    store.cancel(canceled)
    envelopes = {task_id: {**ENVELOPE, "message": task_id} for task_id in (retry, permanent, last, canceled, foreign)}
    failures = [
        Failure(retry, envelopes[retry], retryable=True, delay_ms=60_000),
        Failure(permanent, envelopes[permanent], retryable=False),
        Failure(last, envelopes[last], retryable=True),
        Failure(canceled, envelopes[canceled], retryable=True),
        Failure(foreign, envelopes[foreign], retryable=True),
    ]
    before = store.now_ms()
    answer, count = statements_during(lambda: store.fail_many("w1", failures))
    assert count == STATEMENTS[write_mode]["settle"]
    assert answer == {retry: "queued", permanent: "failed", last: "failed", canceled: "canceled"}
    row = fresh(store, retry)
    assert row.worker_id is None and row.attempt == 1 and row.completed_at_ms is None
    assert row.run_at_ms >= before + 60_000 and row.error == envelopes[retry]
    for task_id in (permanent, last, canceled):
        row = fresh(store, task_id)
        assert row.error == envelopes[task_id] and row.completed_at_ms is not None
        assert row.worker_id == "w1" and row.lease_until_ms is None
    row = fresh(store, foreign)
    assert row.status == "running" and row.error is None
    assert store.fail_many("w1", []) == {}
    with pytest.raises(ValueError, match="delay_ms"):
        store.fail_many("w1", [Failure(retry, ENVELOPE, delay_ms=-1)])


def test_release_hands_back_without_counting_the_attempt(store: Store) -> None:
    plain = submit(store, priority=3).id
    canceled = submit(store, priority=2).id
    foreign = submit(store, priority=1).id
    claim_all(store, 2, "w1")
    claim_all(store, 1, "w2")
    store.progress(plain, "w1", 0.5, "half")
    store.cancel(canceled)
    released = store.release([plain, canceled, foreign, "task_unknown"], "w1")
    assert sorted(released) == sorted([plain, canceled])
    row = fresh(store, plain)
    assert (row.status, row.attempt, row.worker_id, row.lease_until_ms) == ("queued", 0, None, None)
    assert (row.progress, row.message, row.completed_at_ms) == (None, None, None)
    row = fresh(store, canceled)
    assert row.status == "canceled" and row.completed_at_ms is not None and row.lease_until_ms is None
    assert fresh(store, foreign).status == "running"
    assert store.release([], "w1") == []
    # The handed-back task is claimable again, as attempt 1.
    again = store.claim(["default"], "w3")
    assert [(r.id, r.attempt) for r in again] == [(plain, 1)]


def test_heartbeat_batch_is_one_statement(store: Store, write_mode: str) -> None:
    rows = [submit(store).id for _ in range(5)]
    claim_all(store, 5, "w1")
    answer, count = statements_during(lambda: store.heartbeat_batch(rows, "w1", 60_000))
    assert count == STATEMENTS[write_mode]["renew"] and set(answer) == set(rows)


def test_cancel_many_and_retry_many(store: Store) -> None:
    running = submit(store, priority=9).id
    done = submit(store, priority=5).id
    queued = submit(store, priority=1).id
    claim_all(store, 1)
    claim_all(store, 1)
    store.complete(done, "w1", None)
    changed, count = statements_during(lambda: store.cancel_many([queued, running, done, "task_unknown"]))
    assert count == 1
    assert {t.id: t.status for t in changed} == {queued: "canceled", running: "running"}
    assert fresh(store, running).cancel_requested_at_ms is not None
    assert fresh(store, done).status == "succeeded"
    store.fail(running, "w1", ENVELOPE)  # cancel wins -> canceled
    retried, count = statements_during(
        lambda: store.retry_many([queued, running, done], reset_attempt=True)
    )
    assert count == 1
    assert {t.id for t in retried} == {queued, running}
    assert all(t.status == "queued" and t.attempt == 0 and t.error is None for t in retried)
    assert fresh(store, done).status == "succeeded"
    assert store.cancel_many([]) == [] and store.retry_many([]) == []


def test_cancel_many_large_selection(store: Store) -> None:
    rows = store.submit_many([spec(value={"i": i}) for i in range(2_000)])
    changed = store.cancel_many([t.id for t in rows])
    assert len(changed) == 2_000 and {t.status for t in changed} == {"canceled"}


def test_submit_many_keys_and_order(store: Store) -> None:
    existing = submit(store, key="existing")
    specs = [
        spec("a", {"i": 0}),
        spec("b", {"i": 1}, key="new"),
        spec("c", {"i": 2}, key="existing"),  # reuse -> the existing task
        spec("d", {"i": 3}, key="new"),  # same batch, same key: reuses b
        spec("e", {"i": 4}, key="existing-2", queue="q'x"),
        spec("f", {"i": 5}, key="existing", conflict="replace"),
    ]
    out = store.submit_many(specs)
    assert [t.payload for t in out][:2] == [{"i": 0}, {"i": 1}]
    assert out[2].id == existing.id and out[3].id == out[1].id
    assert out[4].queue == "q'x"
    assert out[5].id != existing.id and fresh(store, existing.id).status == "canceled"
    assert store.get_by_key("existing").id == out[5].id  # type: ignore[union-attr]
    assert store.get_by_key("new").id == out[1].id  # type: ignore[union-attr]


def test_submit_many_is_one_transaction(store: Store) -> None:
    submit(store, key="taken")
    before = len(store.list(limit=1000))
    with pytest.raises(AlreadyExists):
        store.submit_many([spec(), spec(key="fresh"), spec(key="taken", conflict="reject")])
    assert len(store.list(limit=1000)) == before
    assert store.get_by_key("fresh") is None


def test_submit_many_chunks_unkeyed_rows(store: Store) -> None:
    n = INSERT_CHUNK * 2 + 7
    out = store.submit_many([spec(value={"i": i}, priority=i % 3) for i in range(n)])
    assert [t.payload["i"] for t in out] == list(range(n))
    assert all(t.root_id == t.id and t.attempt == 0 for t in out)
    assert store.queue_depth("default", n + 1) == 1


@pytest.mark.parametrize(
    "text",
    ["it's", 'say "hi"', "a; DROP TABLE cairnq_tasks; --", "100%", "%s %(id)s %%", "back\\slash", "ünï'c😀de"],
)
def test_metacharacters_round_trip_as_data(store: Store, text: str) -> None:
    task = submit(store, text, queue=text, key=text, correlation_id=text)
    assert (task.name, task.queue) == (text, text)
    assert store.get_by_key(text).id == task.id  # type: ignore[union-attr]
    assert submit(store, "other", key=text).id == task.id
    assert [t.id for t in store.list(queue=text, name=text, correlation_id=text)] == [task.id]
    assert store.has_claimable([text], [text])
    rows = store.claim([text], "w'1", names=[text])
    assert [r.id for r in rows] == [task.id] and rows[0].worker_id == "w'1"
    store.progress(task.id, "w'1", 0.5, text)
    assert store.complete(task.id, "w'1", payload.encode({text: text})).result == {text: text}
    assert store.stats(text)[text]["succeeded"] == 1
    time.sleep(0.005)
    assert store.purge(queue=text, name=text) == [task.id]


def test_submit_joins_the_callers_transaction(store: Store) -> None:
    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        task = submit(store)
        keyed = submit(store, key="in-tx")
        raise Abort
    assert store.get(task.id) is None and store.get(keyed.id) is None
    assert store.get_by_key("in-tx") is None


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [({"conflict": "overwrite"}, "conflict"), ({"max_attempts": 0}, "max_attempts"), ({"delay_ms": -1}, "delay_ms")],
)
def test_submit_validation(store: Store, kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(ValueError, match=argument):
        store.submit(spec(key="k", **kwargs))
    with pytest.raises(ValueError, match=argument):
        store.submit_many([spec(), spec(**kwargs)])
    assert store.list() == []


def test_owned_writes_raise_lost_lease(store: Store) -> None:
    task = submit(store)
    claim_all(store, 1, "w1")
    for call in (
        lambda: store.heartbeat(task.id, "w2", 1000),
        lambda: store.progress(task.id, "w2", 0.1, None),
        lambda: store.succeed(task.id, "w2", None),
        lambda: store.complete(task.id, "w2", None),
        lambda: store.fail(task.id, "w2", ENVELOPE),
    ):
        with pytest.raises(LostLease):
            call()
    assert fresh(store, task.id).status == "running"


def test_claim_session_runs_several_draws(store: Store) -> None:
    a = [submit(store, "a").id for _ in range(3)]
    b = [submit(store, "b").id for _ in range(3)]

    def plan(draw: Any) -> None:
        assert len(draw(["a"], 2)) == 2
        assert draw([], 5) == [] and draw(["b"], 0) == []
        assert len(draw(["b"], 5)) == 3

    rows = store.claim_session(ClaimRequest(["default"], "w1", 30_000, ["a", "b"]), plan)
    assert rows is not None and len(rows) == 5
    assert sorted(r.name for r in rows) == ["a", "a", "b", "b", "b"]
    assert {r.id for r in rows} <= set(a) | set(b)
    assert store.claim_session(ClaimRequest(["default"], "w1", 30_000, ["b"]), plan) is None  # probe says nothing


def test_get_store_per_alias(store: Store) -> None:
    assert get_store() is store and get_store("default") is store
    with pytest.raises(ImproperlyConfigured):
        get_store("no-such-alias")


@pytest.fixture
def sqlite_no_busy_handler(dialect: str) -> Any:
    """Turn off SQLite's own busy wait, so the store's retry loop is what waits."""
    if dialect != "sqlite":
        pytest.skip("SQLite contention handling")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 0")
    yield connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 5000")


def _hold_write_lock(path: str, seconds: float, locked: threading.Event) -> None:
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    locked.set()
    time.sleep(seconds)
    other.execute("COMMIT")
    other.close()


def test_sqlite_waits_out_a_locked_database(store: Store, sqlite_no_busy_handler: str) -> None:
    locked = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(sqlite_no_busy_handler, 0.3, locked))
    holder.start()
    locked.wait(5)
    started = time.monotonic()
    task = submit(store, key="while-locked")
    holder.join()
    assert time.monotonic() - started >= 0.2
    assert fresh(store, task.id).status == "queued"


def test_sqlite_gives_up_after_the_busy_budget(store: Store, sqlite_no_busy_handler: str) -> None:
    locked = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(sqlite_no_busy_handler, 1.0, locked))
    holder.start()
    locked.wait(5)
    try:
        with override_settings(CAIRNQ={"SQLITE_BUSY_TIMEOUT_MS": 100}):
            started = time.monotonic()
            with pytest.raises(OperationalError, match="SQLITE_BUSY_TIMEOUT_MS"):
                submit(store)
            assert time.monotonic() - started < 0.9
    finally:
        holder.join()


def test_sqlite_inside_callers_atomic_is_not_retried(store: Store, sqlite_no_busy_handler: str) -> None:
    locked = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(sqlite_no_busy_handler, 0.5, locked))
    holder.start()
    locked.wait(5)
    try:
        # The caller owns the transaction: a retry would replay only part of
        # their work, so the store hands the error straight back.
        with pytest.raises(OperationalError, match="locked"), transaction.atomic():
            submit(store)
    finally:
        holder.join()


def test_postgres_keyed_operations_take_the_shared_key_lock(store: Store, dialect: str) -> None:
    """Upstream SDKs lock ``hashtextextended(key, 0)``; a keyed submit must wait on it."""
    if dialect != "postgres":
        pytest.skip("PostgreSQL advisory lock")
    import psycopg

    conf = connection.settings_dict
    locked = threading.Event()

    def hold() -> None:
        with psycopg.connect(
            dbname=conf["NAME"], user=conf["USER"] or None, host=conf["HOST"] or None, port=conf["PORT"] or None
        ) as other, other.transaction():
            other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ["it's-key"])
            locked.set()
            time.sleep(0.4)

    for call in (lambda: submit(store, key="it's-key"), lambda: store.cancel_by_key("it's-key")):
        holder = threading.Thread(target=hold)
        holder.start()
        locked.wait(5)
        started = time.monotonic()
        call()
        waited = time.monotonic() - started
        holder.join()
        locked.clear()
        assert waited >= 0.25


def test_postgres_bulk_submit_streams_its_rows_with_copy(
    store: Store, dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if dialect != "postgres":
        pytest.skip("COPY is PostgreSQL's")
    import psycopg

    from cairnq_django.store.postgres.store import COPY_ID_RUN

    copies: list[str] = []
    real_copy = psycopg.Cursor.copy

    def recording_copy(self: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
        copies.append(str(statement))
        return real_copy(self, statement, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "copy", recording_copy)
    # Text COPY has its own escapes (backslash, tab, newline, \N for null):
    # values that spell them must arrive as written.
    awkward = {"s": "tab\there\nnew\\N \\ back\\slash \"quoted\" \u00e9 \U0001f600", "n": None}
    n = COPY_ID_RUN * 2 + 7
    specs = [spec(value={"i": i, **awkward}, delay_ms=(i % 4) * 1000, priority=i % 3) for i in range(n)]
    out = store.submit_many(specs)
    assert len(copies) == 1 and "COPY cairnq_tasks" in copies[0]
    assert [t.payload["i"] for t in out] == list(range(n))
    assert len({t.created_at_ms for t in out}) == 1
    for task in out[:: COPY_ID_RUN // 3] + out[-3:]:
        stored = fresh(store, task.id)
        assert stored.payload == task.payload == {"i": task.payload["i"], **awkward}
        assert stored.run_at_ms == task.run_at_ms == task.created_at_ms + task.payload["i"] % 4 * 1000
        assert (stored.status, stored.priority, stored.root_id) == ("queued", task.priority, task.id)


# Text that COPY's text format would read as something else if it were sent
# as written: its four escaped characters, its NULL marker, its end-of-data
# marker, a trailing backslash, and characters Python does not print.
AWKWARD_TEXTS = [
    "tab\there", "line\nbreak", "carriage\rreturn", "back\\slash", "\\N", "\\.", "ends\\",
    "\\t spelled", "vt\x0bff\x0cus\x1f", "nbsp\u00a0ls\u2028", "\u00e9\U0001f600",
]


def test_bulk_submit_keeps_every_text_column_as_written(store: Store) -> None:
    # Past COPY_MIN_ROWS on PostgreSQL these rows go as COPY text; each
    # awkward value appears in every text column a submit writes.
    n = len(AWKWARD_TEXTS) * 5
    specs = []
    for i in range(n):
        value = AWKWARD_TEXTS[i % len(AWKWARD_TEXTS)]
        specs.append(
            SubmitSpec(
                name=f"name {value}",
                payload_json=payload.encode_object({"v": value}),
                queue=f"queue {value}",
                metadata_json=payload.encode_object({"m": value}),
                parent_id=f"parent {value}",
                root_id=f"root {value}",
                correlation_id=f"correlation {value}",
            )
        )
    out = store.submit_many(specs)
    for i, task in enumerate(out):
        value = AWKWARD_TEXTS[i % len(AWKWARD_TEXTS)]
        stored = fresh(store, task.id)
        for row in (task, stored):
            assert (row.name, row.queue, row.parent_id, row.root_id, row.correlation_id) == (
                f"name {value}", f"queue {value}", f"parent {value}", f"root {value}", f"correlation {value}",
            )
            assert (row.payload, row.metadata) == ({"v": value}, {"m": value})


def test_postgres_bulk_submit_logged_by_django_uses_insert_statements(store: Store, dialect: str) -> None:
    if dialect != "postgres":
        pytest.skip("the COPY path is PostgreSQL's")
    n = INSERT_CHUNK * 2 + 5
    with CaptureQueriesContext(connection) as ctx:
        out = store.submit_many([spec(value={"i": i}) for i in range(n)])
    inserts = [q for q in ctx.captured_queries if "INSERT INTO cairnq_tasks" in q["sql"]]
    assert len(inserts) == 3
    assert [t.payload["i"] for t in out] == list(range(n))
    assert [fresh(store, t.id).payload["i"] for t in out[:: INSERT_CHUNK - 1]] == list(range(0, n, INSERT_CHUNK - 1))


def test_postgres_failed_copy_writes_nothing_and_keeps_the_callers_transaction(
    store: Store, dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if dialect != "postgres":
        pytest.skip("COPY is PostgreSQL's")
    from cairnq_django.store.postgres import store as postgres

    # The last part repeats an id of the first: the server refuses it after
    # the first parts' rows were already sent and inserted.
    n = postgres.COPY_ID_RUN * 2 + 50
    ids = itertools.chain(
        [f"task_copy_{i:04d}" for i in range(postgres.COPY_ID_RUN * 2)], itertools.repeat("task_copy_0000")
    )
    monkeypatch.setattr(postgres, "new_task_ids", lambda count: [next(ids) for _ in range(count)])
    with transaction.atomic():
        before = store.submit(spec(value={"kept": True}))
        with pytest.raises(IntegrityError):
            store.submit_many([spec(value={"i": i}) for i in range(n)])
        # The failed batch rolled back to its savepoint; the caller's own work stands.
        after = store.submit(spec(value={"kept": True}))
    assert not Task.objects.filter(id__startswith="task_copy_").exists()
    assert Task.objects.filter(id__in=[before.id, after.id]).count() == 2
    monkeypatch.undo()
    assert len(store.submit_many([spec(value={"i": i}) for i in range(postgres.COPY_MIN_ROWS + 1)])) == postgres.COPY_MIN_ROWS + 1


def test_a_spec_that_raises_while_a_bulk_submit_streams_writes_nothing(
    store: Store, dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The API hands submit_many a generator that checks each item as it is
    # read. Where the store streams (PostgreSQL's COPY), rows before the bad
    # one have already reached the server when it raises; the batch must
    # still write nothing, and the caller's transaction must stay usable.
    from cairnq_django.store.postgres.store import COPY_ID_RUN

    n = COPY_ID_RUN * 3
    bad = n - 10
    read: list[int] = []
    rows_sent_before_the_bad_item: list[int] = []
    if dialect == "postgres":
        import psycopg

        real_write = psycopg.Copy.write

        def counting_write(self: Any, data: Any) -> None:
            rows_sent_before_the_bad_item.append(data.count("\n"))
            real_write(self, data)

        monkeypatch.setattr(psycopg.Copy, "write", counting_write)

    def specs() -> Any:
        for i in range(n):
            read.append(i)
            if i == bad:
                raise ValueError(f"item {bad} is bad")
            yield spec(value={"i": i}, queue="streamed")

    with transaction.atomic():
        before = store.submit(spec(value={"kept": True}, queue="streamed"))
        with pytest.raises(ValueError, match=f"item {bad} is bad"):
            store.submit_many(specs())
        after = store.submit(spec(value={"kept": True}, queue="streamed"))
    assert read[-1] == bad
    if dialect == "postgres":
        from cairnq_django.store.postgres.store import COPY_WRITE_BYTES

        # Rows went out as their items were read: all but the last piece's
        # worth (each row here is over 100 characters).
        sent = sum(rows_sent_before_the_bad_item)
        assert bad - COPY_WRITE_BYTES // 100 <= sent < bad
    assert sorted(Task.objects.filter(queue="streamed").values_list("id", flat=True)) == sorted([before.id, after.id])


def test_worker_writes_use_returning_only_outside_large_row_mode(store: Store, write_mode: str) -> None:
    # SQLite's large-row mode exists to keep RETURNING (a third copy of each
    # row) off every write the worker makes; elsewhere those writes answer
    # with one statement each.
    submit(store)
    submit(store)

    def writes() -> None:
        first, second = claim_all(store, 2, "w1")
        store.heartbeat(first.id, "w1", 30_000)
        store.progress(first.id, "w1", 0.5, "half")
        store.heartbeat_batch([first.id, second.id], "w1", 30_000)
        store.complete(first.id, "w1", None)
        store.complete_many("w1", [(second.id, None)])

    with CaptureQueriesContext(connection) as ctx:
        writes()
    # Statement text without the files' comments (which name RETURNING too).
    texts = ["\n".join(line for line in q["sql"].splitlines() if not line.lstrip().startswith("--"))
             for q in ctx.captured_queries]
    updates = [sql for sql in texts if "UPDATE cairnq_tasks" in sql]
    assert len(updates) == 6
    returning = [sql for sql in updates if "RETURNING" in sql]
    assert len(returning) == (0 if write_mode == "large_rows" else 6)
