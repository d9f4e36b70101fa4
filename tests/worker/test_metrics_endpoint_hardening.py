"""Pin that scrapers cannot take a worker's work away (``cairnq_worker --metrics-port``).

Real sockets against a real endpoint: a worker process for the flood of idle
connections (its threads and file descriptors read from ``/proc``), the
server class in this process where a test needs to count renders or time one
connection. Pins: an endpoint listening beyond this host by default; idle
or dribbling connections kept open past the timeout, or each costing a
thread; a scrape shut out by idle connections; 200 scrapes rendering 200
times.
"""

from __future__ import annotations

import math
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

import cairnq_django as cq
from cairnq_django.metrics import http_server
from cairnq_django.metrics.exposition import FRESH_S
from cairnq_django.metrics.http_server import MetricsServer

from .conftest import wait_until
from .test_metrics_endpoint import metrics_url, scrape, value

IDLE_CONNECTIONS = 400
# Beyond the server's own bounds: scheduling slack on a loaded test host.
SLACK_S = 3.0
# Connections past the cap wait in the backlog; a round of them is let in each
# time the oldest ones have been silent GRACE_S, pushing those out.
ROUNDS = math.ceil(IDLE_CONNECTIONS / http_server.MAX_CONNECTIONS)


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def closed_by_peer(sock: socket.socket, deadline: float) -> bool:
    """Whether the server closes ``sock`` before ``deadline`` (monotonic), having sent nothing."""
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


class RenderCounter(Collector):
    """One gauge; counts how often the registry was rendered."""

    def __init__(self) -> None:
        self.renders = 0

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.renders += 1
        yield GaugeMetricFamily("probe_renders", "Times this registry was rendered.", value=self.renders)


@pytest.fixture
def served() -> Iterator[tuple[MetricsServer, RenderCounter]]:
    registry = CollectorRegistry()
    counter = RenderCounter()
    registry.register(counter)
    server = MetricsServer(registry, "127.0.0.1", 0)
    yield server, counter
    server.stop()


def run_noops(count: int) -> None:
    tasks = [cq.submit("demo.noop", {}) for _ in range(count)]
    wait_until(lambda: all(cq.get(task.id).status == "succeeded" for task in tasks), what=f"{count} tasks run")


def test_idle_connections_are_dropped_cost_no_thread_and_never_lock_a_scrape_out(
    start_worker: Any, cairnq_db: Any
) -> None:
    worker = start_worker("--metrics-port", "0")
    worker.wait_ready()
    url = metrics_url(worker)
    # No --metrics-host: this host only.
    assert url.startswith("http://127.0.0.1:"), url
    address = urlsplit(url)
    # Warmed up first: the worker starts some threads of its own with its first tasks.
    run_noops(5)
    scrape(url)
    thread_base, fd_base = threads(worker.pid), open_fds(worker.pid)

    idle = [socket.create_connection((address.hostname, address.port), timeout=5) for _ in range(IDLE_CONNECTIONS)]
    last_opened = time.monotonic()
    try:
        # One serving thread whatever the connections (a thread each, before).
        assert threads(worker.pid) <= thread_base + 2, (thread_base, threads(worker.pid))
        # A scrape behind the flood is answered before any idle connection has timed out.
        started = time.monotonic()
        samples = scrape(url)
        waited = time.monotonic() - started
        assert waited < http_server.TIMEOUT_S, f"the scrape waited {waited:.1f} s"
        assert value(samples, "cairnq_worker_tasks_succeeded_total") == 5
        # The worker still works: tasks submitted now are run.
        run_noops(20)
        assert threads(worker.pid) <= thread_base + 2, (thread_base, threads(worker.pid))
        # Every idle connection is closed by the server: pushed out, or at its timeout once let in.
        deadline = last_opened + ROUNDS * http_server.GRACE_S + http_server.TIMEOUT_S + SLACK_S
        still_open = [sock for sock in idle if not closed_by_peer(sock, deadline)]
        assert not still_open, f"{len(still_open)} idle connections still open after {deadline - last_opened:.1f} s"
    finally:
        for sock in idle:
            sock.close()
    # Their file descriptors are given back.
    wait_until(lambda: open_fds(worker.pid) <= fd_base + 2, what="the connections' descriptors closed")
    assert value(scrape(url), "cairnq_worker_tasks_succeeded_total") == 25
    worker.kill_group()


def test_200_concurrent_scrapes_render_a_few_times(served: tuple[MetricsServer, RenderCounter]) -> None:
    server, counter = served
    scrapes = 200
    ready = threading.Barrier(scrapes)
    answers: list[bytes] = []
    failures: list[BaseException] = []

    def one() -> None:
        ready.wait()
        try:
            with urllib.request.urlopen(server.url, timeout=20) as response:
                answers.append(response.read())
        except OSError as exc:  # reported below, with the count
            failures.append(exc)

    pool = [threading.Thread(target=one) for _ in range(scrapes)]
    started = time.monotonic()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=60)
    elapsed = time.monotonic() - started
    assert not failures, failures[:3]
    assert len(answers) == scrapes and all(b"probe_renders" in answer for answer in answers)
    # At most one render per FRESH_S while they ran (and never one per scrape).
    assert counter.renders == server.exposition.renders
    assert 1 <= counter.renders <= 1 + math.ceil(elapsed / FRESH_S), (counter.renders, elapsed)
    assert counter.renders <= 10


def test_a_connection_that_dribbles_its_request_is_dropped_at_the_timeout(
    served: tuple[MetricsServer, RenderCounter], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A request's head has TIMEOUT_S in all, however its bytes come. 1 s here
    # instead of 5, still five times the gap between two bytes (a timeout per
    # read would never end this connection), so the test does not wait 5 s.
    monkeypatch.setattr(http_server, "TIMEOUT_S", 1.0)
    server, counter = served
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as slow:
        opened = time.monotonic()
        dropped_at = None
        # One byte every 0.2 s: each read arrives well within any per-read timeout.
        for byte in request:
            try:
                slow.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                dropped_at = time.monotonic()
                break
            slow.settimeout(0.2)
            try:
                if slow.recv(1) == b"":
                    dropped_at = time.monotonic()
                    break
            except TimeoutError:
                pass
            except ConnectionResetError:
                dropped_at = time.monotonic()
                break
        assert dropped_at is not None, "the server never dropped the connection"
        assert dropped_at - opened <= http_server.TIMEOUT_S + SLACK_S
    assert counter.renders == 0


def test_get_and_head_are_answered_other_methods_refused(served: tuple[MetricsServer, RenderCounter]) -> None:
    server, _ = served
    with urllib.request.urlopen(server.url, timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        body = response.read()
    assert b"# TYPE probe_renders gauge" in body
    head = urllib.request.Request(server.url, method="HEAD")
    with urllib.request.urlopen(head, timeout=5) as response:
        assert response.status == 200 and int(response.headers["Content-Length"]) > 0
        assert response.read() == b""
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(server.url, data=b"x", method="POST"), timeout=5)
    assert refused.value.code == 405
    refused.value.close()


def test_a_registry_that_cannot_render_answers_500_and_keeps_serving() -> None:
    class Broken(Collector):
        def collect(self) -> Iterator[GaugeMetricFamily]:
            raise RuntimeError("collector down")

    registry = CollectorRegistry()
    registry.register(Broken())
    server = MetricsServer(registry, "127.0.0.1", 0)
    try:
        for _ in range(2):
            with pytest.raises(urllib.error.HTTPError) as failed:
                urllib.request.urlopen(server.url, timeout=5)
            assert failed.value.code == 500
            failed.value.close()
    finally:
        server.stop()


def test_stop_closes_the_port_and_open_connections() -> None:
    registry = CollectorRegistry()
    Counter("probe", "A counter.", registry=registry).inc()
    server = MetricsServer(registry, "127.0.0.1", 0)
    waiting = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    with waiting:
        server.stop()
        assert closed_by_peer(waiting, time.monotonic() + 2)
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", server.port), timeout=2):
        pass


def test_serving_other_hosts_is_a_choice(start_worker: Any, cairnq_db: Any) -> None:
    by_setting = start_worker("--metrics-port", "0", overrides={"METRICS_HOST": "0.0.0.0"})
    by_flag = start_worker("--metrics-port", "0", "--metrics-host", "0.0.0.0", overrides={"METRICS_HOST": "127.0.0.1"})
    for worker in (by_setting, by_flag):
        worker.wait_ready()
        url = metrics_url(worker)
        assert re.match(r"http://0\.0\.0\.0:\d+/metrics$", url), url
        assert scrape(url.replace("0.0.0.0", "127.0.0.1"))
        worker.kill_group()


@pytest.mark.parametrize("host", ["", " 127.0.0.1", 7, "a\x00b"])
def test_a_bad_metrics_host_setting_is_refused(cairnq_db: Any, host: Any) -> None:
    with override_settings(CAIRNQ={"METRICS_HOST": host}), pytest.raises(
        CommandError, match=r'CAIRNQ\["METRICS_HOST"\] must be a host name or address'
    ):
        call_command("cairnq_worker", "--burst", "--metrics-port", "0")
