"""Pin the pause API: ``pause_queue``, ``resume_queue``, ``paused_queues`` and their async twins.

Pins: a bad argument that writes anything or fails without naming itself;
a second pause that overwrites the first one's time, author or reason; a
resume of an unpaused queue that raises; a pause that leaks out of a
rolled-back transaction; submit refusing a paused queue (it must accept and
hold the tasks); and, on PostgreSQL, a resume that does not send the
``cairnq_queued`` notification idle workers wake on, or sends it before commit.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction

import cairnq_django as cq
from cairnq_django.models import QueuePause


def pause_rows() -> list[tuple[str, str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT queue, paused_by, reason FROM cairnq_django_queue_pause ORDER BY queue")
        return [tuple(row) for row in cursor.fetchall()]


def test_pause_resume_and_list(store: Any) -> None:
    before = store.now_ms()
    pause = cq.pause_queue("emails", reason="provider outage", by="alice")
    assert isinstance(pause, QueuePause) and isinstance(pause, cq.QueuePause)
    assert (pause.queue, pause.paused_by, pause.reason) == ("emails", "alice", "provider outage")
    assert before <= pause.paused_at_ms <= store.now_ms()
    assert pause.paused_at is not None and pause.paused_at.tzinfo is not None
    cq.pause_queue("reports")
    assert [(p.queue, p.paused_by, p.reason) for p in cq.paused_queues()] == [
        ("emails", "alice", "provider outage"),
        ("reports", "", ""),
    ]
    assert cq.resume_queue("emails") is True
    assert [p.queue for p in cq.paused_queues()] == ["reports"]


def test_pausing_twice_keeps_the_first_pause(store: Any) -> None:
    first = cq.pause_queue("emails", reason="outage", by="alice")
    time.sleep(0.005)
    again = cq.pause_queue("emails", reason="something else", by="bob")
    assert (again.queue, again.paused_at_ms, again.paused_by, again.reason) == (
        "emails", first.paused_at_ms, "alice", "outage",
    )
    assert pause_rows() == [("emails", "alice", "outage")]


def test_resuming_an_unpaused_queue_is_not_an_error(store: Any) -> None:
    assert cq.resume_queue("never-paused") is False
    cq.pause_queue("emails")
    assert cq.resume_queue("emails") is True
    assert cq.resume_queue("emails") is False
    assert cq.paused_queues() == []


def test_a_queue_may_be_paused_before_it_has_tasks_and_still_takes_submits(store: Any) -> None:
    cq.pause_queue("later")
    task = cq.submit("demo.noop", {}, queue="later")
    assert task.status == "queued" and task.queue == "later"
    assert store.claim(["later"], "worker_test") == []
    cq.resume_queue("later")
    assert [row.id for row in store.claim(["later"], "worker_test")] == [task.id]


def test_queue_names_are_data(store: Any) -> None:
    # Names an SQL builder could mangle: quotes, a LIKE wildcard, 1,024 bytes of UTF-8.
    names = ["it's", 'say "hi"', "100%", "a_b", "é" * 512, "x;DROP TABLE cairnq_tasks--"]
    for name in names:
        cq.pause_queue(name)
    assert sorted(p.queue for p in cq.paused_queues()) == sorted(names)
    for name in names:
        task = cq.submit("demo.noop", {}, queue=name)
        assert store.claim([name], "worker_test") == []
        assert cq.resume_queue(name) is True
        assert [row.id for row in store.claim([name], "worker_test")] == [task.id]


BAD_NAMES = [
    ("", "must be a non-empty string"),
    (None, "must be a non-empty string"),
    (7, "must be a non-empty string"),
    ("a\x00b", "must not contain NUL"),
    ("\udc80", "must not contain a lone surrogate"),
    ("x" * 1025, "must be at most 1024 bytes"),
    ("é" * 513, "must be at most 1024 bytes"),
]


@pytest.mark.parametrize(("name", "problem"), BAD_NAMES)
def test_a_bad_queue_name_is_refused_naming_the_argument(store: Any, name: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=rf"^name {problem}"):
        cq.pause_queue(name)
    with pytest.raises(ValueError, match=rf"^name {problem}"):
        cq.resume_queue(name)
    assert pause_rows() == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"reason": None}, r"^reason must be a string"),
        ({"reason": "a\x00b"}, r"^reason must not contain NUL"),
        ({"reason": "é" * 513}, r"^reason must be at most 1024 bytes"),
        ({"by": 5}, r"^by must be a string"),
        ({"by": "\udc80"}, r"^by must not contain a lone surrogate"),
        ({"by": "u" * 151}, r"^by must be at most 150 characters"),
    ],
)
def test_a_bad_reason_or_author_is_refused_naming_the_argument(
    store: Any, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        cq.pause_queue("emails", **options)
    assert pause_rows() == []


def test_the_longest_accepted_values_are_stored(store: Any) -> None:
    cq.pause_queue("é" * 512, reason="r" * 1024, by="u" * 150)
    assert pause_rows() == [("é" * 512, "u" * 150, "r" * 1024)]


def test_a_pause_joins_the_callers_transaction(store: Any) -> None:
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            cq.pause_queue("emails")
            raise RuntimeError
    assert pause_rows() == []
    cq.pause_queue("emails")
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            assert cq.resume_queue("emails") is True
            raise RuntimeError
    assert [p.queue for p in cq.paused_queues()] == ["emails"]


def test_async_twins(store: Any) -> None:
    async def scenario() -> tuple[Any, ...]:
        pause = await cq.apause_queue("emails", reason="r", by="b")
        listed = [p.queue for p in await cq.apaused_queues()]
        resumed = await cq.aresume_queue("emails")
        again = await cq.aresume_queue("emails")
        return pause.queue, listed, resumed, again

    assert async_to_sync(scenario)() == ("emails", ["emails"], True, False)
    with pytest.raises(ValueError, match="^name "):
        async_to_sync(cq.apause_queue)("")


# ---- PostgreSQL: the resume's wake-up ----------------------------------------------


@pytest.fixture
def listener(dialect: str) -> Any:
    """A connection LISTENing on cairnq_queued, as a worker's waker does."""
    if dialect != "postgres":
        pytest.skip("NOTIFY is PostgreSQL's; a SQLite worker sees the commit itself")
    import psycopg

    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "pool"):
        params.pop(key, None)
    conn = psycopg.connect(**params, autocommit=True)
    conn.execute("LISTEN cairnq_queued")
    yield conn
    conn.close()


def heard(conn: Any, timeout: float = 0.5) -> list[str]:
    return [note.payload for note in conn.notifies(timeout=timeout, stop_after=10)]


def test_resume_notifies_the_queue_at_commit(store: Any, listener: Any) -> None:
    cq.pause_queue("emails")
    assert heard(listener, 0.2) == []  # a pause wakes nobody: workers find it at their next claim
    with transaction.atomic():
        assert cq.resume_queue("emails") is True
        assert heard(listener, 0.2) == []  # not before the commit
    assert heard(listener) == ["emails"]


def test_resume_of_an_unpaused_or_rolled_back_queue_notifies_nobody(store: Any, listener: Any) -> None:
    assert cq.resume_queue("emails") is False
    cq.pause_queue("emails")
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            cq.resume_queue("emails")
            raise RuntimeError
    assert heard(listener, 0.3) == []
