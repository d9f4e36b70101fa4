"""Pin the queue metrics view (``cairnq_django.metrics.queue_metrics``, mounted at
``/metrics/queues`` by the test project): who may read it, that its gauges
match the rows, that it renders label values the Prometheus parser reads
back, and that concurrent scrapers cost one reading per second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection, connections
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

import cairnq_django as cq
from cairnq_django.metrics import reading_cache
from cairnq_django.models import Task, Worker

from . import make_task, staff_user

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/metrics/queues"
TOKEN = "metrics-token-0123456789abcdef"
# Only the live statuses: terminal totals would need a read of every row.
STATUSES = ("queued", "running")


@pytest.fixture(autouse=True)
def fresh_reading() -> Iterator[None]:
    # The view caches its text for a second in the default (in-process) cache.
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def with_token() -> Iterator[None]:
    with override_settings(CAIRNQ={"METRICS_TOKEN": TOKEN}):
        yield


def gauges(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def read(client: Client, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get(URL, headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return gauges(response.content.decode())


# ---- access ---------------------------------------------------------------------


def test_anonymous_gets_401_with_a_bearer_challenge(cairnq_db: Any, with_token: None) -> None:
    response = Client().get(URL)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"cairnq_queue" not in response.content


@pytest.mark.parametrize(
    "header",
    ["Bearer wrong-token-0123456789abcdef", f"Bearer {TOKEN}x", f"Basic {TOKEN}", "Bearer", TOKEN],
)
def test_a_wrong_token_gets_401(cairnq_db: Any, with_token: None, header: str) -> None:
    response = Client().get(URL, headers={"Authorization": header})
    assert response.status_code == 401
    assert b"cairnq_queue" not in response.content


def test_the_right_token_reads(cairnq_db: Any, with_token: None) -> None:
    response = Client().get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert b"# TYPE cairnq_queue_tasks gauge" in response.content


def test_no_token_is_accepted_when_none_is_configured(cairnq_db: Any) -> None:
    assert Client().get(URL, headers={"Authorization": "Bearer None"}).status_code == 401
    assert Client().get(URL, headers={"Authorization": "Bearer "}).status_code == 401


def test_staff_without_view_task_gets_403(cairnq_db: Any) -> None:
    client = Client()
    client.force_login(staff_user("nobody", "cancel_task"))
    assert client.get(URL).status_code == 403


def test_view_task_without_staff_gets_403(cairnq_db: Any) -> None:
    user = staff_user("viewer", "view_task")
    user.is_staff = False
    user.save()
    client = Client()
    client.force_login(user)
    assert client.get(URL).status_code == 403


def test_staff_with_view_task_reads(cairnq_db: Any) -> None:
    client = Client()
    client.force_login(staff_user("viewer", "view_task"))
    assert client.get(URL).status_code == 200
    client.force_login(User.objects.create_superuser("root", password="pw"))
    assert client.get(URL).status_code == 200


def test_only_get(cairnq_db: Any, with_token: None) -> None:
    assert Client().post(URL, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 405


# ---- the gauges --------------------------------------------------------------------


def test_gauges_match_the_rows(store: Any, with_token: None) -> None:
    for state in ("queued", "queued", "running", "succeeded"):
        make_task(store, state, queue="mail")
    for state in ("failed", "canceled"):
        make_task(store, state, queue="video")
    make_task(store, "queued", queue="later", delay_ms=3_600_000)  # not due for an hour
    oldest = make_task(store, "queued", queue="mail")
    # Due two minutes ago: the queue's oldest due task, whatever its priority.
    Task.objects.filter(pk=oldest.pk).update(run_at_ms=store.now_ms() - 120_000, priority=-5)
    cq.pause_queue("idle", reason="maintenance")  # a paused queue with no task
    cq.pause_queue("video")

    got = read(Client(), Authorization=f"Bearer {TOKEN}")

    expected = {
        "mail": {"queued": 3, "running": 1},
        "video": {},  # only terminal tasks: shown, with zeros
        "later": {"queued": 1},
        "idle": {},
    }
    for queue, counts in expected.items():
        for status in STATUSES:
            key = ("cairnq_queue_tasks", (("queue", queue), ("status", status)))
            assert got[key] == counts.get(status, 0), (queue, status)
    assert 120 <= got[("cairnq_queue_oldest_due_age_seconds", (("queue", "mail"),))] < 150
    for queue in ("video", "later", "idle"):
        assert got[("cairnq_queue_oldest_due_age_seconds", (("queue", queue),))] == 0
    paused = {queue: got[("cairnq_queue_paused", (("queue", queue),))] for queue in expected}
    assert paused == {"mail": 0, "video": 1, "later": 0, "idle": 1}
    # Nothing but these three families, and no queue beyond those with rows or pauses.
    assert {name for name, _ in got} == {
        "cairnq_queue_tasks", "cairnq_queue_oldest_due_age_seconds", "cairnq_queue_paused", "cairnq_queue_live_workers"
    }
    assert {dict(labels)["queue"] for _, labels in got} == set(expected)
    assert {dict(labels)["status"] for _, labels in got if "status" in dict(labels)} == set(STATUSES)


# Long beats, so a slow test does not turn a live row lost before the reading.
BEAT_MS = 10_000


def register(worker_id: str, queues: list[str], last_seen_ms: int, *, stopped: bool = False) -> None:
    Worker.objects.create(
        id=worker_id, host="h", pid=1, queues=queues, names=[], concurrency=1, heartbeat_interval_ms=BEAT_MS,
        started_at_ms=last_seen_ms, last_seen_at_ms=last_seen_ms, stopped_at_ms=last_seen_ms if stopped else None,
    )


def test_live_workers_are_counted_per_queue_they_serve(store: Any, with_token: None) -> None:
    make_task(store, "queued", queue="mail")
    now = store.now_ms()
    register("w-both", ["mail", "video"], now)
    register("w-mail", ["mail"], now - 2 * BEAT_MS)  # two beats late: still live (lost after three)
    register("w-lost", ["mail"], now - 10 * BEAT_MS)
    register("w-stopped", ["mail"], now, stopped=True)
    got = read(Client(), Authorization=f"Bearer {TOKEN}")
    live = {dict(labels)["queue"]: value for (name, labels), value in got.items() if name == "cairnq_queue_live_workers"}
    # "video" has no task: a live worker serving it is enough to show the queue.
    assert live == {"mail": 2, "video": 1}
    assert got[("cairnq_queue_tasks", (("queue", "video"), ("status", "queued")))] == 0


def test_label_values_survive_the_text_format(store: Any, with_token: None) -> None:
    odd = 'we"ird\\queue\nname é'
    make_task(store, "queued", queue=odd)
    got = read(Client(), Authorization=f"Bearer {TOKEN}")
    assert got[("cairnq_queue_tasks", (("queue", odd), ("status", "queued")))] == 1


def test_an_empty_database_exports_the_families_without_samples(cairnq_db: Any, with_token: None) -> None:
    response = Client().get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    text = response.content.decode()
    assert "# TYPE cairnq_queue_tasks gauge" in text and gauges(text) == {}


# ---- one reading per second -------------------------------------------------------------


def _is_reading(sql: str) -> bool:
    # The reading's one statement (store/<dialect>/sql/queue_overview.sql).
    return "walked(queue, step)" in sql


def test_concurrent_scrapers_cost_one_reading_per_second(store: Any, with_token: None) -> None:
    make_task(store, "queued", queue="mail")
    readings: list[float] = []
    statements: list[str] = []
    answers: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    stop_at = time.monotonic() + 2.5

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        with lock:
            statements.append(sql)
            if _is_reading(sql):
                readings.append(time.monotonic())
        return execute(sql, params, many, context)

    def scraper() -> None:
        try:
            client = Client()
            with connection.execute_wrapper(count):  # this thread's own connection
                while time.monotonic() < stop_at:
                    status = client.get(URL, headers={"Authorization": f"Bearer {TOKEN}"}).status_code
                    with lock:
                        answers.append(status)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    started = time.monotonic()
    threads = [threading.Thread(target=scraper) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    elapsed = time.monotonic() - started
    assert not errors, errors
    # Every scraper was answered, each more than once (how often depends on the machine's load).
    assert len(answers) > 2 * len(threads) and set(answers) == {200}, (len(answers), set(answers))
    # A reading every second at most: 2.5 s of scraping makes three (at 0, 1+, 2+ s).
    assert 1 <= len(readings) <= int(elapsed) + 1, (readings, elapsed)
    assert all(b - a >= 1.0 for a, b in zip(readings, readings[1:])), readings
    # And a reading is one statement, none per scraper.
    assert len(statements) == len(readings), statements


def test_the_reading_is_renewed_after_a_second(store: Any, with_token: None) -> None:
    client = Client()
    key = ("cairnq_queue_tasks", (("queue", "mail"), ("status", "queued")))
    make_task(store, "queued", queue="mail")
    assert read(client, Authorization=f"Bearer {TOKEN}")[key] == 1
    make_task(store, "queued", queue="mail")
    assert read(client, Authorization=f"Bearer {TOKEN}")[key] == 1  # the cached text
    time.sleep(1.1)
    assert read(client, Authorization=f"Bearer {TOKEN}")[key] == 2


def _never() -> str:
    raise AssertionError("a second reader must not read while the lock is held")


def test_a_reader_waiting_on_a_stuck_lock_serves_the_last_text_or_gives_up(cairnq_db: Any) -> None:
    assert reading_cache.cached_text(lambda: "first\n") == "first\n"
    cache.delete(reading_cache.KEY)  # a second later: the fresh copy has expired
    assert cache.add(reading_cache.LOCK_KEY, 1, 30)  # another scraper reads, and hangs
    assert reading_cache.cached_text(_never, wait_s=0.1) == "first\n"
    cache.delete(reading_cache.STALE_KEY)
    with pytest.raises(reading_cache.ReadingBusy):
        reading_cache.cached_text(_never, wait_s=0.1)
    # The lock's holder finishes: its text is served to the others.
    cache.set(reading_cache.KEY, "second\n", 1)
    assert reading_cache.cached_text(_never, wait_s=0.1) == "second\n"
