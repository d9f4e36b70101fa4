"""The registry's readers: ``cairnq.workers()``, ``cairnq_stats --workers`` and the workers admin.

Pins: a lost or stopped worker listed as live (or a live one hidden); a
state computed from another clock than the rows' (the store's); the command
missing a worker or a column, or JSON that does not parse; the workers list
or a worker's page failing to render, offering edits, not listing the
worker's running tasks, or spelling its times otherwise than the task pages;
and a task's page that does not link to its worker.
"""

from __future__ import annotations

import json
import re
from io import StringIO
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

import cairnq_django as cairnq
from cairnq_django.admin.values import time_text
from cairnq_django.models import Task, Worker
from cairnq_django.store.base import WorkerRecord

from . import WORKER, make_task

pytestmark = pytest.mark.django_db(transaction=True)

BEAT_MS = 1_000


def register(store: Any, worker_id: str, *, seen_ago_ms: int = 0, stopped: bool = False, **fields: Any) -> Worker:
    """Register a worker through the store's beat, then age or stop it."""
    record = WorkerRecord(
        worker_id=worker_id,
        host=fields.get("host", "host-a"),
        pid=fields.get("pid", 4242),
        queues=fields.get("queues", ["default", "mail"]),
        names=fields.get("names", ["demo.noop"]),
        concurrency=fields.get("concurrency", 4),
        resources=fields.get("resources", {"gpu": 1}),
        global_resources=fields.get("global_resources", {}),
        version="0.1.0",
        heartbeat_interval_ms=BEAT_MS,
        in_flight=1,
        succeeded=7,
        failed=2,
        per_minute=12.5,
    )
    store.worker_beat(record, [], 30_000)
    if stopped:
        assert store.stop_worker(record)
    if seen_ago_ms:
        row = Worker.objects.get(pk=worker_id)
        Worker.objects.filter(pk=worker_id).update(
            last_seen_at_ms=row.last_seen_at_ms - seen_ago_ms, started_at_ms=row.started_at_ms - seen_ago_ms
        )
    return Worker.objects.get(pk=worker_id)


@pytest.fixture
def three(store: Any) -> dict[str, Worker]:
    """A live worker, one lost (not seen for four beats) and one stopped."""
    return {
        "live": register(store, "worker_live"),
        "lost": register(store, "worker_lost", seen_ago_ms=4 * BEAT_MS, host="host-b"),
        "stopped": register(store, "worker_stopped", stopped=True),
    }


@pytest.fixture
def superuser_client(cairnq_db: Any) -> Client:
    from django.contrib.auth.models import User

    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def test_workers_lists_live_ones_unless_asked(three: dict[str, Worker]) -> None:
    assert [worker.id for worker in cairnq.workers()] == ["worker_live"]
    assert {w.id: w.state for w in cairnq.workers(include_lost=True)} == {"worker_live": "live", "worker_lost": "lost"}
    every = {w.id: w.state for w in cairnq.workers(include_lost=True, include_stopped=True)}
    assert every == {"worker_live": "live", "worker_lost": "lost", "worker_stopped": "stopped"}
    (live,) = cairnq.workers()
    assert live.queues == ("default", "mail") and live.names == ("demo.noop",)
    assert live.concurrency == 4 and dict(live.resources) == {"gpu": 1} and live.host == "host-a"
    assert (live.in_flight, live.succeeded, live.failed, live.per_minute, live.version) == (1, 7, 2, 12.5, "0.1.0")
    assert live.stopped_at is None and live.started_at <= live.last_seen_at
    (stopped,) = [w for w in cairnq.workers(include_stopped=True) if w.state == "stopped"]
    assert stopped.stopped_at is not None and stopped.in_flight == 0 and stopped.per_minute == 0


def test_a_worker_is_lost_only_after_three_beats(store: Any) -> None:
    register(store, "worker_late", seen_ago_ms=2 * BEAT_MS)
    assert [w.id for w in cairnq.workers()] == ["worker_late"]
    Worker.objects.filter(pk="worker_late").update(last_seen_at_ms=store.now_ms() - 3 * BEAT_MS - 200)
    assert cairnq.workers() == [] and [w.state for w in cairnq.workers(include_lost=True)] == ["lost"]


def test_aworkers_matches_workers(three: dict[str, Worker]) -> None:
    async def read() -> list[Any]:
        return await cairnq.aworkers(include_lost=True)

    # async_to_sync from the test thread: the thread-sensitive call comes back
    # here and uses the test's own connection.
    assert [w.id for w in async_to_sync(read)()] == [w.id for w in cairnq.workers(include_lost=True)]


def test_prune_deletes_only_rows_older_than_the_keep_time(store: Any, three: dict[str, Worker]) -> None:
    assert store.prune_workers(3 * BEAT_MS) == 1
    assert sorted(Worker.objects.values_list("id", flat=True)) == ["worker_live", "worker_stopped"]
    with pytest.raises(ValueError, match="keep_ms"):
        store.prune_workers(0)


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_stats_workers_prints_live_and_lost_ones(three: dict[str, Worker]) -> None:
    lines = run("cairnq_stats", "--workers").splitlines()
    assert lines[0].split()[:4] == ["worker", "state", "host", "pid"]
    assert "in flight" in lines[0] and "succeeded" in lines[0]
    body = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(body) == {"worker_live", "worker_lost"}
    assert body["worker_live"][1:5] == ["live", "host-a", "4242", "default,mail"]
    assert body["worker_lost"][1] == "lost"
    assert body["worker_live"][-5:] == ["4", "1", "7", "2", "12.5"]
    assert "worker_stopped" in run("cairnq_stats", "--workers", "--all")
    assert set(run("cairnq_stats", "--workers", "--queue", "mail").split()) >= {"worker_live", "worker_lost"}
    assert "worker_" not in run("cairnq_stats", "--workers", "--queue", "other")


def test_stats_workers_json(three: dict[str, Worker]) -> None:
    listed = json.loads(run("cairnq_stats", "--workers", "--json", "--all"))
    assert {row["id"]: row["state"] for row in listed} == {
        "worker_live": "live", "worker_lost": "lost", "worker_stopped": "stopped"
    }
    live = next(row for row in listed if row["id"] == "worker_live")
    assert live["queues"] == ["default", "mail"] and live["resources"] == {"gpu": 1} and live["stopped_at"] is None


def test_stats_workers_without_any(cairnq_db: Any) -> None:
    assert run("cairnq_stats", "--workers").strip() == "no workers"
    assert json.loads(run("cairnq_stats", "--workers", "--json")) == []


def test_workers_changelist_shows_state_and_filters(three: dict[str, Worker], superuser_client: Client) -> None:
    url = reverse("admin:cairnq_worker_changelist")
    html = superuser_client.get(url).content.decode()
    for worker_id, state in (("worker_live", "live"), ("worker_lost", "lost"), ("worker_stopped", "stopped")):
        assert worker_id in html
        assert f"cairnq-badge--worker-{state}" in html
    lost_only = superuser_client.get(url, {"state": "lost"}).content.decode()
    assert "worker_lost" in lost_only and "worker_live" not in lost_only and "worker_stopped" not in lost_only
    assert "worker_live" in superuser_client.get(url, {"q": "host-a"}).content.decode()
    # Listed on the app's index next to the tasks.
    assert url in superuser_client.get(reverse("admin:app_list", args=["cairnq"])).content.decode()


def test_worker_page_lists_its_running_tasks(store: Any, superuser_client: Client) -> None:
    register(store, WORKER)
    mine = make_task(store, "running")
    done = make_task(store, "succeeded")
    response = superuser_client.get(reverse("admin:cairnq_worker_change", args=[WORKER]))
    assert response.status_code == 200
    html = response.content.decode()
    assert f'<a href="{reverse("admin:cairnq_task_change", args=[mine.id])}">{mine.id}</a>' in html
    assert done.id not in html
    assert "12.5 attempts per minute over the last minute" in html and "host-a" in html
    assert 'name="_save"' not in html
    # Read-only: no add, change or delete.
    assert superuser_client.get(reverse("admin:cairnq_worker_add")).status_code == 403
    delete = reverse("admin:cairnq_worker_delete", args=[WORKER])
    assert superuser_client.post(delete, {"post": "yes"}).status_code == 403
    assert Worker.objects.filter(pk=WORKER).exists()


def test_task_page_links_to_its_worker(store: Any, superuser_client: Client) -> None:
    task = make_task(store, "running")
    page = reverse("admin:cairnq_task_change", args=[task.id])
    worker_url = reverse("admin:cairnq_worker_change", args=[WORKER])
    # Not registered (another SDK's worker, or pruned): the id, without a link.
    html = superuser_client.get(page).content.decode()
    assert WORKER in html and worker_url not in html
    register(store, WORKER)
    html = superuser_client.get(page).content.decode()
    assert f'<a href="{worker_url}">{WORKER}</a>' in html


def test_dashboard_counts_live_workers_per_queue(
    store: Any, three: dict[str, Worker], superuser_client: Client
) -> None:
    make_task(store, queue="default")
    make_task(store, queue="mail")
    make_task(store, queue="video")
    register(store, "worker_video", queues=["video"])
    response = superuser_client.get(reverse("admin:cairnq_task_dashboard"))
    rows = {row.queue: row.live_workers for row in response.context["rows"]}
    # The lost and the stopped worker serve default and mail too, and do not count.
    assert rows == {"default": 1, "mail": 1, "video": 1}
    assert f'{reverse("admin:cairnq_worker_changelist")}?state=live' in response.content.decode()


def test_worker_page_spells_times_as_the_task_pages_do(store: Any, superuser_client: Client) -> None:
    """Started, last seen and stopped read "2025-01-02 03:04:05.678 UTC", as a task's timeline does."""
    worker = register(store, "worker_times", stopped=True)
    task = make_task(store)
    html = superuser_client.get(reverse("admin:cairnq_worker_change", args=["worker_times"])).content.decode()
    for field, ms in (
        ("started_display", worker.started_at_ms),
        ("last_seen_display", worker.last_seen_at_ms),
        ("stopped_display", worker.stopped_at_ms),
    ):
        shown = re.search(rf'<div class="[^"]*field-{field}[^"]*">.*?<div class="readonly">(.*?)</div>', html, re.S)
        assert shown is not None, field
        assert shown.group(1) == time_text(ms), (field, shown.group(1))
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", shown.group(1)), shown.group(1)
    assert "+00:00" not in html
    # The task's page spells its times the same way.
    task_page = superuser_client.get(reverse("admin:cairnq_task_change", args=[task.id])).content.decode()
    assert time_text(Task.objects.get(pk=task.id).created_at_ms) in task_page
