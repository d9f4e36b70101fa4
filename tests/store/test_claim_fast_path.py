"""The claim session's shortcuts (issue 7) and the guarantees they must keep.

Pins: a probe that stops telling an expired lease apart from due work (so
recovery would run every poll, or never); a recovery skipped although a lease
expired; a single-draw session that still opens a transaction (two wasted round
trips) or that lets a plan draw twice outside one; ``async_commit`` leaking
``synchronous_commit = off`` into other transactions on the connection, or not
reaching the claim at all; rows decoded in bulk differing from rows decoded one
by one.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from cairnq_django.conf import get_config
from cairnq_django.protocol import payload
from cairnq_django.store.rows import decode_row, decode_rows
from cairnq_django.store.base import ClaimRequest, Store, SubmitSpec


def submit(store: Store, name: str = "job", value: Any = None, **kwargs: Any) -> Any:
    return store.submit(SubmitSpec(name=name, payload_json=payload.encode_object(value), **kwargs))


def expire_lease(store: Store, lease_ms: int = 100) -> Any:
    task = submit(store, "stale")
    (claimed,) = store.claim(["default"], "w-dead", lease_ms=lease_ms, names=["stale"])
    assert claimed.id == task.id
    time.sleep(lease_ms / 1000 + 0.05)
    return task


def test_probe_answers_due_and_expired_separately(store: Store) -> None:
    nothing = store.probe_claim(["default"], None)
    assert (nothing.due, nothing.expired, nothing.any) == (False, False, False)
    submit(store, "a")
    due = store.probe_claim(["default"], ["a"])
    assert (due.due, due.expired) == (True, False)
    assert store.probe_claim(["default"], ["b"]).due is False
    expire_lease(store)
    mixed = store.probe_claim(["default"], ["b"])
    assert (mixed.due, mixed.expired, mixed.any) == (False, True, True)


def test_recovery_runs_only_when_a_lease_expired(store: Store) -> None:
    submit(store, "a")

    def plan(draw: Any) -> None:
        draw(["a"], 1)

    with CaptureQueriesContext(connection) as ctx:
        assert len(store.claim_session(ClaimRequest(["default"], "w1", 30_000, ["a"]), plan) or []) == 1
    assert not any("Recover every expired lease" in q["sql"] for q in ctx.captured_queries)

    stale = expire_lease(store)
    submit(store, "a")
    with CaptureQueriesContext(connection) as ctx:
        rows = store.claim_session(ClaimRequest(["default"], "w1", 30_000, ["a"], single_draw=True), plan) or []
    assert len(rows) == 1
    assert any("Recover every expired lease" in q["sql"] for q in ctx.captured_queries)
    recovered = store.get(stale.id)
    assert recovered is not None and recovered.status == "queued" and recovered.worker_id is None


def test_single_draw_session_runs_without_a_transaction(store: Store, write_mode: str) -> None:
    submit(store, "a")
    seen: list[bool] = []

    def plan(draw: Any) -> None:
        seen.append(connection.in_atomic_block)
        draw(["a"], 1)

    with CaptureQueriesContext(connection) as ctx:
        rows = store.claim_session(
            ClaimRequest(["default"], "w1", 30_000, ["a"], probe=False, recover=False, single_draw=True), plan
        )
    assert rows is not None and len(rows) == 1 and rows[0].status == "running"
    assert seen == [False]
    commits = [q["sql"] for q in ctx.captured_queries if q["sql"].strip().upper() in ("BEGIN", "COMMIT")]
    if write_mode == "returning":
        assert commits == []
        assert len(ctx.captured_queries) == 1  # no probe, no recovery: the draw alone
    else:
        # SQLite's large-row mode: the draw is pick, write and read, committed together.
        assert commits == ["COMMIT"]
        assert ctx.captured_queries[0]["sql"] == "BEGIN IMMEDIATE"
        assert len(ctx.captured_queries) == 5


def test_single_draw_session_refuses_a_second_draw(store: Store) -> None:
    submit(store, "a")
    submit(store, "b")

    def plan(draw: Any) -> None:
        draw(["a"], 1)
        draw(["b"], 1)

    with pytest.raises(RuntimeError, match="drew twice"):
        store.claim_session(ClaimRequest(["default"], "w1", 30_000, None, probe=False, recover=False, single_draw=True), plan)


def test_async_commit_applies_to_the_claim_transaction_only(store: Store, dialect: str) -> None:
    if dialect != "postgres":
        pytest.skip("synchronous_commit is a PostgreSQL setting")
    submit(store, "a")
    submit(store, "a")
    inside: list[str] = []

    def plan(draw: Any) -> None:
        draw(["a"], 1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('synchronous_commit')")
            inside.append(cursor.fetchone()[0])

    store.claim_session(ClaimRequest(["default"], "w1", 30_000, ["a"], async_commit=True), plan)
    store.claim_session(ClaimRequest(["default"], "w1", 30_000, ["a"], async_commit=False), plan)
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('synchronous_commit')")
        after = cursor.fetchone()[0]
    assert inside == ["off", "on"]
    assert after == "on"  # SET LOCAL semantics: nothing leaks past the claim


def sqlite_synchronous() -> int:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous")
        return int(cursor.fetchone()[0])


@pytest.fixture
def sqlite_full(dialect: str) -> Any:
    """The connection at synchronous=FULL, SQLite's default (the test settings use NORMAL)."""
    if dialect != "sqlite":
        pytest.skip("PRAGMA synchronous is SQLite's")
    original = sqlite_synchronous()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous=2")
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA synchronous={original}")


def test_sqlite_async_commit_relaxes_the_claim_session_only(store: Store, sqlite_full: None) -> None:
    for _ in range(3):
        submit(store, "a")
    inside: list[int] = []

    def plan(draw: Any) -> None:
        draw(["a"], 1)
        inside.append(sqlite_synchronous())

    before = sqlite_synchronous()
    store.claim_session(ClaimRequest(["default"], "w1", 30_000, ["a"], probe=False, recover=False, single_draw=True, async_commit=True), plan)
    store.claim_session(ClaimRequest(["default"], "w1", 30_000, ["a"], async_commit=True), plan)  # the full session: a transaction
    store.claim_session(ClaimRequest(["default"], "w1", 30_000, ["a"], async_commit=False), plan)
    assert before == 2
    assert inside == [1, 1, 2]
    assert sqlite_synchronous() == before  # restored when the session ended
    with connection.cursor() as cursor:  # and every claim was committed
        cursor.execute("SELECT count(*) FROM cairnq_tasks WHERE status = 'running'")
        assert cursor.fetchone()[0] == 3


def test_sqlite_claims_inside_a_callers_transaction_stay_synchronous(store: Store, sqlite_full: None) -> None:
    submit(store, "a")
    inside: list[int] = []

    def plan(draw: Any) -> None:
        draw(["a"], 1)
        inside.append(sqlite_synchronous())

    with transaction.atomic():
        store.claim_session(ClaimRequest(["default"], "w1", 30_000, ["a"], async_commit=True), plan)
    assert inside == [2]


def test_bulk_decoding_matches_row_by_row() -> None:
    texts = ['{"a":[1,2,{"b":null}]}', '"42"', "[]", "3.5", '"s3://x"', "null", '{"k":"\\u00e9"}']
    rows = [
        {"id": str(i), "payload": text, "metadata": "{}", "result": None, "error": text}
        for i, text in enumerate(texts)
    ]
    one_by_one = [decode_row(dict(row)) for row in rows]
    assert decode_rows([dict(row) for row in rows]) == one_by_one
    # Text Python cannot decode no longer raises: that column carries the
    # marker and every other column is decoded (tests/store/test_undecodable_rows.py).
    [bad] = decode_rows([{"payload": "{not json", "metadata": "{}"}])
    assert isinstance(bad["payload"], payload.Undecodable) and bad["payload"].text == "{not json"
    assert bad["metadata"] == {}


def _plan_cache_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        return str(cursor.fetchone()[0])


def test_a_worker_connection_plans_each_claim_once(store: Store, dialect: str) -> None:
    # Planning a claim costs about as much as running it for one task, and
    # PostgreSQL never settles on one plan by itself (without the LIMIT's
    # value its plan looks dearer). A worker's claim connection asks to keep
    # one plan per statement; any other connection keeps the default.
    if dialect != "postgres":
        pytest.skip("plan_cache_mode is a PostgreSQL setting")
    if get_config()["TRANSACTION_POOLING"]:
        pytest.skip("behind a transaction pooler nothing is prepared and no session SET is sent")
    for _ in range(8):
        submit(store, "a")

    # Two names: a one-name claim is planned on every call (store/postgres/store.py).
    def plan(draw: Any) -> None:
        draw(["a", "b"], 1)

    def claim(**kwargs: Any) -> None:
        store.claim_session(ClaimRequest(["default"], "w1", 30_000, ["a", "b"], single_draw=True, **kwargs), plan)

    connection.close()
    with transaction.atomic():
        claim(reuse_plans=True)  # inside a transaction a rollback would undo it: not set
        assert _plan_cache_mode() == "auto"
    connection.close()  # a fresh connection: no statement prepared under the default
    for _ in range(6):
        claim(reuse_plans=True)
    assert _plan_cache_mode() == "force_generic_plan"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            ["%picked AS MATERIALIZED%"],
        )
        (text, generic, custom), = cursor.fetchall()
    assert "LIMIT" in text and generic >= 6 and custom == 0
    # A new connection starts with the default again.
    connection.close()
    claim()
    assert _plan_cache_mode() == "auto"
