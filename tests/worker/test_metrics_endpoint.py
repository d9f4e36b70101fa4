"""Pin the worker's own Prometheus endpoint (``cairnq_worker --metrics-port``).

Scraped over HTTP from a real worker process after it ran tasks: outcome
counters by name and queue, the run, pickup and claim histograms, calls in
flight, a lease lost to another owner. Also: the flags' errors, the missing extra's message, and that a worker
without the flag (or a process serving only the queue view) never imports
``prometheus_client``.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from prometheus_client.parser import text_string_to_metric_families

import cairnq_django as cq
from cairnq_django import signals
from cairnq_django.metrics.worker_series import WorkerSeries
from cairnq_django.models import Task

from .conftest import REPO, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

Samples = list[tuple[str, dict[str, str], float]]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return [
        (sample.name, dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def value(samples: Samples, metric: str, /, **labels: str) -> float:
    """The sum of ``metric``'s samples whose labels include ``labels`` (0 when there is none)."""
    return sum(v for n, got, v in samples if n == metric and labels.items() <= got.items())


def metrics_url(worker: Any) -> str:
    """The address the worker printed under its banner (waited for: the banner may come out first)."""
    found = wait_until(
        lambda: re.search(r"metrics: (http://\S+)", worker.output()) or not worker.alive(), what="the metrics line"
    )
    assert found is not True, f"worker exited:\n{worker.output()[-2000:]}"
    return found.group(1)


def test_worker_endpoint_counts_what_it_ran(start_worker: Any, cairnq_db: Any) -> None:
    for _ in range(3):
        cq.submit("demo.noop", {})
    others = [cq.submit("demo.noop", {}, queue="other") for _ in range(2)]
    crash = cq.submit("demo.crash", {}, max_attempts=2)  # one retry, then failed
    rejected = cq.submit("demo.task_error", {})  # not retryable: failed at once
    snoozed = cq.submit("demo.snooze", {"times": 1})  # snoozed once, then succeeded
    # Every first attempt waits at least this long once due: a pickup floor.
    time.sleep(1.0)
    worker = start_worker(
        "--queue", "default", "--queue", "other",
        "--metrics-port", "0", "--metrics-host", "127.0.0.1", "--retry-backoff-ms", "0",
    )
    worker.wait_ready()
    url = metrics_url(worker)
    ids = [task.id for task in others] + [crash.id, rejected.id, snoozed.id]
    wait_until(lambda: all(cq.get(task_id).is_terminal for task_id in ids), what="every task settled")
    # The outcome is written before the worker counts it: wait for the last count.
    samples = wait_until(
        lambda: (s := scrape(url))
        and value(s, "cairnq_worker_tasks_succeeded_total") == 6
        and value(s, "cairnq_worker_tasks_failed_total") == 2
        and s,
        what="the worker's counts",
    )

    def counted(kind: str, name: str, queue: str = "default") -> float:
        return value(samples, f"cairnq_worker_tasks_{kind}_total", name=name, queue=queue)

    assert counted("started", "demo.noop") == 3 and counted("started", "demo.noop", "other") == 2
    assert counted("succeeded", "demo.noop") == 3 and counted("succeeded", "demo.noop", "other") == 2
    assert counted("started", "demo.crash") == 2
    assert counted("retried", "demo.crash") == 1 and counted("failed", "demo.crash") == 1
    assert counted("started", "demo.task_error") == 1 and counted("failed", "demo.task_error") == 1
    assert counted("retried", "demo.task_error") == 0
    assert counted("started", "demo.snooze") == 2
    assert counted("snoozed", "demo.snooze") == 1 and counted("succeeded", "demo.snooze") == 1
    assert value(samples, "cairnq_worker_tasks_canceled_total") == 0
    assert value(samples, "cairnq_worker_lease_losses_total") == 0

    # Histograms: one run per attempt, one pickup per start, a claim per draw.
    assert value(samples, "cairnq_worker_task_run_seconds_count", name="demo.noop") == 5
    assert value(samples, "cairnq_worker_task_run_seconds_count", name="demo.crash") == 2
    assert value(samples, "cairnq_worker_task_run_seconds_count", name="demo.snooze") == 2
    assert value(samples, "cairnq_worker_task_pickup_seconds_count", queue="default") == 8
    assert value(samples, "cairnq_worker_task_pickup_seconds_count", queue="other") == 2
    # Both "other" tasks were due a second before the worker started.
    assert value(samples, "cairnq_worker_task_pickup_seconds_bucket", queue="other", le="0.5") == 0
    assert value(samples, "cairnq_worker_task_pickup_seconds_sum", queue="other") >= 2.0
    assert value(samples, "cairnq_worker_claim_seconds_count") >= 1
    assert value(samples, "cairnq_worker_calls_in_flight") == 0

    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_calls_in_flight_and_a_lost_lease(start_worker: Any, cairnq_db: Any) -> None:
    task = cq.submit("demo.hang", {"seconds": 60})
    worker = start_worker("--metrics-port", "0", "--metrics-host", "127.0.0.1", overrides={"LEASE_MS": 1500})
    worker.wait_ready()
    url = metrics_url(worker)
    wait_until(lambda: cq.get(task.id).is_running, what="the task running")
    samples = wait_until(lambda: (s := scrape(url)) and value(s, "cairnq_worker_calls_in_flight") == 1 and s)
    assert value(samples, "cairnq_worker_tasks_started_total", name="demo.hang") == 1
    assert value(samples, "cairnq_worker_lease_losses_total") == 0
    # Another owner takes the task: the next heartbeat finds the lease gone.
    assert Task.objects.filter(id=task.id).update(worker_id="worker_thief") == 1
    samples = wait_until(
        lambda: (s := scrape(url)) and value(s, "cairnq_worker_lease_losses_total") == 1 and s,
        what="the lease loss counted",
    )
    assert value(samples, "cairnq_worker_lease_losses_total", name="demo.hang", queue="default") == 1
    # The handler sees its lease lost and returns; nothing was settled.
    wait_until(lambda: value(scrape(url), "cairnq_worker_calls_in_flight") == 0, what="the call ended")
    samples = scrape(url)
    assert sum(value(samples, f"cairnq_worker_tasks_{kind}_total") for kind in ("succeeded", "failed", "retried")) == 0
    worker.kill_group()


def test_a_workers_series_ignore_other_workers() -> None:
    # Two workers in one process (an embedding application, tests): one registry each.
    mine, theirs = WorkerSeries("worker_a", in_flight=lambda: 2), WorkerSeries("worker_b", in_flight=lambda: 0)
    mine.connect()
    theirs.connect()
    try:
        common = {"sender": Task, "task_id": "t1", "name": "n", "queue": "q", "attempt": 1}
        signals.task_started.send(worker_id="worker_a", pickup_ms=1500, **common)
        signals.task_finished.send(worker_id="worker_a", status="queued", duration_ms=20, **common)
        signals.task_lease_lost.send(worker_id="worker_b", **common)
        signals.claim_drawn.send(sender=Task, worker_id="worker_a", rows=1, duration_s=0.002)
    finally:
        mine.disconnect()
        theirs.disconnect()
    signals.task_started.send(worker_id="worker_a", pickup_ms=1, **common)  # after disconnect: not counted
    get = mine.registry.get_sample_value
    assert get("cairnq_worker_tasks_started_total", {"name": "n", "queue": "q"}) == 1
    assert get("cairnq_worker_tasks_retried_total", {"name": "n", "queue": "q"}) == 1
    assert get("cairnq_worker_task_pickup_seconds_sum", {"queue": "q"}) == 1.5
    assert get("cairnq_worker_claim_seconds_count") == 1
    assert get("cairnq_worker_calls_in_flight") == 2
    assert get("cairnq_worker_lease_losses_total", {"name": "n", "queue": "q"}) is None
    assert theirs.registry.get_sample_value("cairnq_worker_lease_losses_total", {"name": "n", "queue": "q"}) == 1
    assert theirs.registry.get_sample_value("cairnq_worker_tasks_started_total", {"name": "n", "queue": "q"}) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics-port", "70000"], "--metrics-port"),
        (["--metrics-port", "-1"], "--metrics-port"),
        (["--metrics-port", "http"], "--metrics-port"),
        (["--metrics-port", "9100", "--metrics-host", ""], "--metrics-host"),
        (["--metrics-host", "127.0.0.1"], "--metrics-host needs --metrics-port"),
    ],
)
def test_bad_metrics_flag_is_a_command_error(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("cairnq_worker", "--burst", *args)


def test_a_port_in_use_is_a_command_error(cairnq_db: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}"):
            call_command("cairnq_worker", "--burst", "--metrics-port", str(port), "--metrics-host", "127.0.0.1")


# A process in which prometheus_client cannot be imported, then the worker command.
_WITHOUT_EXTRA = """
import runpy, sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "prometheus_client":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Missing())
sys.argv = ["manage.py", "cairnq_worker", "--burst", "--metrics-port", "0"]
runpy.run_path("manage.py", run_name="__main__")
"""


def test_missing_extra_says_what_to_install(subprocess_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRA], cwd=REPO, env=subprocess_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr
    assert "--metrics-port needs prometheus-client" in done.stderr
    assert "pip install 'cairnq-django[metrics]'" in done.stderr
    assert "Traceback" not in done.stderr


# Run a burst worker (and load the queue view) in a fresh process; print the prometheus modules it loaded.
_LOADED = """
import json, sys, django
django.setup()
from django.core.management import call_command
import cairnq_django.metrics  # the queue view: no extra needed
call_command("cairnq_worker", "--burst", *sys.argv[1:], stdout=sys.stderr)
print(json.dumps(sorted(name for name in sys.modules if name.startswith("prometheus_client"))))
"""


@pytest.mark.parametrize(("args", "loads"), [([], False), (["--metrics-port", "0", "--metrics-host", "127.0.0.1"], True)])
def test_prometheus_client_is_imported_only_for_the_flag(
    subprocess_env: dict[str, str], args: list[str], loads: bool
) -> None:
    cq.submit("demo.noop", {})
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, *args], cwd=REPO, env=subprocess_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert bool(loaded) is loads, loaded
