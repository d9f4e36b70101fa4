"""Pin that a running worker applies ``CAIRNQ["RETENTION"]``: terminal rows of
the listed statuses disappear after the sweep interval, other statuses and
live rows stay, and a bad retention setting stops start-up with its key."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test.utils import override_settings

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_running_worker_sweeps_retention(cairnq_db: Any, start_worker: Any) -> None:
    done = [cq.submit("demo.noop", {}).id for _ in range(3)]
    failed = cq.submit("demo.crash", {}, max_attempts=1).id
    worker = start_worker(
        overrides={"RETENTION": {"succeeded": 0}, "RETENTION_INTERVAL_MS": 200}
    )
    wait_until(
        lambda: not Task.objects.filter(id__in=done).exists(),
        20,
        what="succeeded rows purged",
    )
    assert Task.objects.get(id=failed).status == "failed"
    # The worker logs the sweep after its delete commits: the rows can be
    # gone a moment before the line is written.
    wait_until(lambda: "retention sweep purged" in worker.output(), 5, what="the sweep's log line")
    # Live rows are never swept.
    later = cq.submit("demo.hang", {"seconds": 30}).id
    wait_until(
        lambda: Task.objects.get(id=later).status == "running", 10, what="running"
    )
    assert Task.objects.filter(id=later).exists()


def test_bad_retention_interval_stops_start_up(cairnq_db: Any) -> None:
    with (
        override_settings(CAIRNQ={"RESOURCES": {"gpu": 1}, "RETENTION_INTERVAL_MS": 0}),
        pytest.raises(CommandError, match="RETENTION_INTERVAL_MS"),
    ):
        call_command("cairnq_worker", "--burst")
