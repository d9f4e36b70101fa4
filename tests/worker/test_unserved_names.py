"""A worker says so when its queues hold tasks no handler of its process serves.

Pins (fault plan F18 b): a row inserted by raw SQL under an unknown name is
never claimed and stays ``queued``; the worker logs one warning per name per
process (not one per check, not one per row), naming the name and the queue;
names in queues the worker does not claim from are not its business; and the
admin flags the row and finds it with its "handler" filter.
"""

from __future__ import annotations

import logging
import re
import signal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse

import cairnq_django as cq
from cairnq_django.protocol.ids import task_id as new_task_id
from cairnq_django.models import Task
from cairnq_django.store import get_store
from cairnq_django.worker.housekeeping import Sweeper

from .conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CHECK = {"UNSERVED_CHECK_INTERVAL_MS": 100}
WARNING = "no worker in this process serves that name"


def insert_raw(name: str, queue: str = "default") -> str:
    """Insert a queued task row with plain SQL, as another SDK would; return its id."""
    task_id = new_task_id()
    now = get_store().now_ms()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO cairnq_tasks (id, name, queue, status, payload, metadata, attempt,"
            " max_attempts, priority, run_at_ms, root_id, created_at_ms, updated_at_ms)"
            " VALUES (%s, %s, %s, 'queued', '{}', '{}', 0, 3, 0, %s, %s, %s, %s)",
            [task_id, name, queue, now, task_id, now, now],
        )
    return task_id


def warnings_for(output: str, name: str) -> list[str]:
    return [line for line in output.splitlines() if "WARNING" in line and repr(name) in line and WARNING in line]


def checks_run(output: str) -> int:
    return len(re.findall(r"unserved-names check: \d+", output))


def test_worker_warns_once_per_unserved_name(cairnq_db: Any, start_worker: Any) -> None:
    ghost = insert_raw("ghost.rawsql")
    elsewhere = insert_raw("ghost.elsewhere", queue="not-mine")
    known = cq.submit("demo.noop", {}).id
    worker = start_worker(overrides=CHECK)
    worker.wait_ready()
    wait_until(lambda: warnings_for(worker.output(), "ghost.rawsql"), 20, what="the warning")
    wait_until(lambda: Task.objects.get(id=known).status == "succeeded", 20, what="known task done")
    # More rows of the same name and several further checks: still one warning.
    insert_raw("ghost.rawsql")
    seen = checks_run(worker.output())
    wait_until(lambda: checks_run(worker.output()) >= seen + 5, 20, what="five more checks")
    out = worker.output()
    [line] = warnings_for(out, "ghost.rawsql")
    assert "queue 'default'" in line
    # A queue this worker does not claim from is not reported.
    assert "ghost.elsewhere" not in out
    # A new unknown name gets its own (single) warning.
    insert_raw("ghost.later")
    wait_until(lambda: warnings_for(worker.output(), "ghost.later"), 20, what="second name's warning")
    assert len(warnings_for(worker.output(), "ghost.rawsql")) == 1
    # Never claimed, never failed.
    for task_id in (ghost, elsewhere):
        row = Task.objects.get(id=task_id)
        assert (row.status, row.attempt, row.worker_id) == ("queued", 0, None)
    assert worker.alive()
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0

    # The admin flags the row and its "handler" filter finds it.
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    listed = client.get(reverse("admin:cairnq_task_changelist"), {"handler": "none"}).content.decode()
    assert ghost in listed and known not in listed and "cairnq-badge--no-handler" in listed
    detail = client.get(reverse("admin:cairnq_task_change", args=[ghost])).content.decode()
    assert 'id="cairnq-no-handler"' in detail


def test_name_left_out_by_task_flag_is_named_as_such(cairnq_db: Any, start_worker: Any) -> None:
    cq.submit("demo.noop", {})
    worker = start_worker("--task", "demo.sleep", overrides=CHECK)
    wait_until(lambda: warnings_for(worker.output(), "demo.noop"), 20, what="the warning")
    assert "registered, but not in this worker's --task list" in warnings_for(worker.output(), "demo.noop")[0]
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 0


def test_check_in_process_reports_each_name_once(store: Any, caplog: pytest.LogCaptureFixture) -> None:
    insert_raw("ghost.a")
    insert_raw("ghost.a", queue="second")
    insert_raw("ghost.b", queue="second")
    cq.submit("demo.noop", {})
    sweeper = Sweeper(
        store,
        interval_ms=3_600_000,
        application_name="test",
        queues=["default", "second"],
        names=["demo.noop"],
        unserved_interval_ms=60_000,
    )
    with caplog.at_level(logging.WARNING, logger="cairnq_django.worker"):
        sweeper.check_unserved()
        sweeper.check_unserved()
    messages = [record.getMessage() for record in caplog.records if WARNING in record.getMessage()]
    assert len(messages) == 2, messages
    [a] = [m for m in messages if "'ghost.a'" in m]
    assert "queues 'default', 'second'" in a or "queues 'second', 'default'" in a
    assert sweeper.reported == {"ghost.a", "ghost.b"}


def test_check_can_be_turned_off(store: Any) -> None:
    sweeper = Sweeper(
        store, interval_ms=3_600_000, application_name="test", queues=["default"], unserved_interval_ms=None
    )
    sweeper.start()
    assert sweeper._thread is None  # no retention rules and no check: no thread


@pytest.mark.parametrize("bad", [0, -5, "60s", True])
def test_bad_interval_names_the_setting(store: Any, bad: Any) -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="UNSERVED_CHECK_INTERVAL_MS"):
        Sweeper(store, interval_ms=1000, application_name="test", queues=["default"], unserved_interval_ms=bad)
