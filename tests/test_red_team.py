"""Pin the findings of issue 35 (a red-team pass), each through the entry point a user meets.

* a weak ``METRICS_TOKEN`` served by the queue metrics view (a WSGI server
  runs no system checks), and check ``cairnq.E019`` disagreeing with it;
* ``cairnq_queues list`` writing control characters to the terminal;
* ``parse_rate`` quadratic on long runs of white space;
* a ``limit_key`` value JSON cannot encode raising ``TypeError``;
* ``cairnq_queues pause`` of a misspelt queue succeeding silently;
* ``cairnq_worker --task`` without a suggestion, and a worker with no handler
  running forever while ``check`` says nothing;
* ``cairnq_worker --help`` giving a wrong default.

The worker's metrics endpoint has its own file
(tests/worker/test_metrics_endpoint_hardening.py).
"""

from __future__ import annotations

import json
import logging
import math
import time
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client, override_settings

import cairnq_django as cq
from cairnq_django import conf
from cairnq_django.checks import check_configuration
from cairnq_django.management.commands import cairnq_worker
from cairnq_django.metrics import access
from cairnq_django.models import Worker
from cairnq_django.protocol import limits
from cairnq_django.protocol.limits import parse_rate
from cairnq_django.tasks.registry import TaskDefinitionError, unregister
from tests._fresh_project import scratch_database, start_project
from tests.admin import make_task, staff_user

METRICS_URL = "/metrics/queues"
STRONG = "k3Jx9-aZq_7Lw2mR8pT4vN6yB0cE5fG1"
# A correctness bound, not a benchmark: the old expression took over 200 s.
LINEAR_S = 2.0


def e019(token: Any) -> bool:
    with override_settings(CAIRNQ={**settings.CAIRNQ, "METRICS_TOKEN": token}):
        return any(message.id == "cairnq.E019" for message in check_configuration())


# ---- 2. METRICS_TOKEN's rule where the token is read ---------------------------------


@pytest.mark.parametrize(
    "token",
    ["a", "x" * 15, "x" * 16, "passwordpassword", "ab" * 8, "abc" * 6, "0123456789" * 3, "hunter2!" * 2, " " + STRONG],
)
def test_a_weak_token_is_refused_by_the_view_and_by_the_check(
    cairnq_db: Any, token: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert e019(token)
    # The refusal is logged at most once a minute: start this test's minute afresh.
    monkeypatch.setattr(access, "_weak_token_logged_at", -math.inf)
    with override_settings(CAIRNQ={"METRICS_TOKEN": token}), caplog.at_level(logging.ERROR, "cairnq_django.metrics"):
        for header in (f"Bearer {token}", f"Bearer {token.strip()}", "Bearer a"):
            response = Client().get(METRICS_URL, headers={"Authorization": header})
            assert response.status_code == 403, header
            assert b"cairnq.E019" in response.content and b"cairnq_queue" not in response.content
        # A staff login is refused too: the deployment is misconfigured until the token is fixed.
        client = Client()
        client.force_login(staff_user("viewer", "view_task"))
        assert client.get(METRICS_URL).status_code == 403
    refusals = [record for record in caplog.records if "refusing to serve the queue metrics" in record.getMessage()]
    assert len(refusals) == 1, caplog.text
    assert "cairnq.E019" in refusals[0].getMessage()
    if len(token.strip()) >= 8:
        assert token.strip() not in refusals[0].getMessage()  # the log never spells the token out


@pytest.mark.parametrize("token", [STRONG, "k3Jx9-aZq_7Lw2mR", "passwordpassword1", "abababababababa_"])
def test_a_strong_token_is_served_and_passes_the_check(cairnq_db: Any, token: str) -> None:
    assert not e019(token)
    with override_settings(CAIRNQ={"METRICS_TOKEN": token}):
        response = Client().get(METRICS_URL, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    assert b"# TYPE cairnq_queue_tasks gauge" in response.content


def test_the_view_and_the_check_apply_one_rule() -> None:
    for token in ["a", "x" * 16, "passwordpassword", "ab" * 8, STRONG, "k3Jx9-aZq_7Lw2mR", None, 7, ""]:
        assert e019(token) is (conf.metrics_token_problem(token) is not None), token
        with override_settings(CAIRNQ={"METRICS_TOKEN": token}):
            assert (access.token_problem() is not None) is e019(token), token


# ---- 3. cairnq_queues list escapes control characters ----------------------------------


def queues(*args: str, **options: Any) -> str:
    out = StringIO()
    call_command("cairnq_queues", *args, stdout=out, **options)
    return out.getvalue()


def test_list_escapes_control_characters(store: Any) -> None:
    name = "evil\x1b[2J\nfake  active  9\x9b31m\x7f\u2028\u202e"
    cq.pause_queue(name, reason="outage\x1b]0;pwned\x07\r\ncontinued\x85", by="ops\x1b[8m")
    make_task(store, "queued", queue=name)
    out = queues("list")
    lines = out.splitlines()
    assert len(lines) == 2, out  # the header and one row: no line break got through
    # Nothing a terminal acts on is left, only the escapes repr writes.
    assert not [char for char in out if char != "\n" and not char.isprintable()], ascii(out)
    assert lines[1].startswith("evil\\x1b[2J\\nfake  active  9\\x9b31m\\x7f\\u2028\\u202e ")
    assert "ops\\x1b[8m" in lines[1]
    assert lines[1].endswith("outage\\x1b]0;pwned\\x07 continued")
    # --json keeps the exact values (JSON escapes them itself).
    [row] = json.loads(queues("list", "--json"))
    assert row["queue"] == name and row["reason"] == "outage\x1b]0;pwned\x07\r\ncontinued\x85"


def test_every_c0_and_c1_control_and_del_is_escaped(store: Any) -> None:
    controls = [*range(0x01, 0x20), 0x7F, *range(0x80, 0xA0)]  # NUL cannot be stored
    cq.pause_queue("q" + "".join(map(chr, controls)), by="".join(map(chr, controls)))
    lines = queues("list").splitlines()
    assert len(lines) == 2
    assert all(char.isprintable() for char in lines[1]), ascii(lines[1])
    assert lines[1].startswith("q\\x01\\x02")
    assert "\\t\\n\\x0b\\x0c\\r" in lines[1] and "\\x7f\\x80" in lines[1] and "\\x9f" in lines[1]


def test_already_paused_message_escapes_the_author(store: Any) -> None:
    cq.pause_queue("emails", by="ops\x1b[2J")
    out = queues("pause", "emails")
    assert "\x1b" not in out and "by ops\\x1b[2J)" in out


def test_no_sub_command_lists(store: Any) -> None:
    assert queues() == "no queues: no tasks and no pauses\n"
    cq.pause_queue("emails")
    assert queues().splitlines()[1].split()[:2] == ["emails", "paused"]


# ---- 6. cairnq_queues pause refuses a queue nothing uses ------------------------------------


def paused() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT queue FROM cairnq_django_queue_pause ORDER BY queue")
        return [row[0] for row in cursor.fetchall()]


def test_pausing_a_misspelt_queue_is_refused_with_a_suggestion(store: Any) -> None:
    make_task(store, "queued", queue="default")
    with pytest.raises(CommandError, match=r"queue 'deafult' \(did you mean 'default'\?\); add --new to pause it"):
        queues("pause", "deafult")
    assert paused() == []
    assert queues("pause", "default") == "paused queue 'default'\n"
    # Ahead of its first task, on purpose.
    assert queues("pause", "deafult", "--new") == "paused queue 'deafult'\n"
    assert paused() == ["deafult", "default"]
    # Once paused it is known: pausing it again says so.
    assert queues("pause", "deafult").startswith("queue 'deafult' was already paused")


def test_a_queue_is_known_by_a_task_a_setting_a_declaration_or_a_live_worker(store: Any) -> None:
    make_task(store, "succeeded", queue="reports")  # a finished task counts too
    now = store.now_ms()
    worker = {"host": "h", "pid": 1, "names": [], "concurrency": 1, "heartbeat_interval_ms": 10_000}
    Worker.objects.create(id="worker_live", queues=["gpu"], started_at_ms=now, last_seen_at_ms=now, **worker)
    Worker.objects.create(
        id="worker_gone", queues=["old"], started_at_ms=now - 3_600_000, last_seen_at_ms=now - 3_600_000, **worker
    )
    cq.task("redteam.declared", queue="declared-q")(lambda ctx, payload: None)
    try:
        with override_settings(CAIRNQ={**settings.CAIRNQ, "QUEUES": ["default", "bulk"]}):
            for queue in ("reports", "gpu", "declared-q", "bulk"):
                assert queues("pause", queue) == f"paused queue {queue!r}\n"
            # A worker lost an hour ago serves nothing.
            with pytest.raises(CommandError, match="no declared task, setting, task, pause or live worker uses queue 'old'"):
                queues("pause", "old")
    finally:
        unregister("redteam.declared")
    assert paused() == ["bulk", "declared-q", "gpu", "reports"]


def test_the_python_api_still_pauses_any_name(store: Any) -> None:
    assert cq.pause_queue("not-yet-used").queue == "not-yet-used"


# ---- 4. parse_rate is linear --------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [" " * 200_000, "1/m" + " " * 200_000 + "x", " " * 100_000 + "1/m" + " " * 100_000, "1" * 200_000, "1/m burst" + "=" * 200_000],
)
def test_a_long_rate_is_refused_at_once(text: str) -> None:
    started = time.monotonic()
    with pytest.raises(ValueError, match="must be at most 100 characters"):
        parse_rate(text)
    assert time.monotonic() - started < LINEAR_S
    # The same through @task, where a rate is written.
    started = time.monotonic()
    with pytest.raises(TaskDefinitionError, match="rate_limit"):
        cq.task("redteam.rate", rate_limit=text)(lambda ctx, payload: None)
    assert time.monotonic() - started < LINEAR_S


@pytest.mark.parametrize(
    "text",
    ["1 " + " , " * 60_000 + "x", "1/m " + "burst " * 40_000, "1" * 200_000 + "/x", "1 / " * 50_000, " \t\n" * 70_000],
)
def test_the_expression_itself_is_linear(text: str) -> None:
    # Past the length bound: white space cut to single spaces, then matched.
    started = time.monotonic()
    assert limits._RATE.fullmatch(" ".join(text.split())) is None
    assert time.monotonic() - started < LINEAR_S


@pytest.mark.parametrize(
    ("text", "count", "window_ms", "burst"),
    [
        ("600/m", 600, 60_000, 600),
        ("2/s", 2, 1_000, 2),
        ("100/10s", 100, 10_000, 100),
        ("600/m burst 20", 600, 60_000, 20),
        ("  600 / m , burst = 20  ", 600, 60_000, 20),
        ("600/m,burst=20", 600, 60_000, 20),
        ("600/M\tBURST\n20", 600, 60_000, 20),
        ("5 / 2 h", 5, 7_200_000, 5),
    ],
)
def test_every_rate_form_still_parses(text: str, count: int, window_ms: int, burst: int) -> None:
    rate = parse_rate(text)
    assert (rate.count, rate.window_ms, rate.burst) == (count, window_ms, burst)
    assert str(rate) == " ".join(text.split())


@pytest.mark.parametrize("text", ["", "600", "600/", "/m", "600/x", "600/m burst", "600/m burst x", "6 00/m", "600/m/s"])
def test_malformed_rates_are_still_refused(text: str) -> None:
    with pytest.raises(ValueError, match="must look like"):
        parse_rate(text)


# ---- 5. limit_key values JSON cannot encode ------------------------------------------------


def _cycle(payload: Any) -> Any:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    ("limit_key", "type_name"),
    [(lambda payload: {1, 2}, "set"), (lambda payload: object(), "object"), (_cycle, "list"), (lambda payload: {1: 2, "a": 3}, "dict")],
)
def test_a_key_json_cannot_encode_is_a_value_error(store: Any, limit_key: Any, type_name: str) -> None:
    cq.task("redteam.keyed", rate_limit="100/s", limit_key=limit_key)(lambda ctx, payload: None)
    try:
        with pytest.raises(ValueError, match=rf"limit_key of task 'redteam.keyed': .* gave a {type_name}, which JSON cannot"):
            cq.submit("redteam.keyed", {"customer": 7})
    finally:
        unregister("redteam.keyed")
    assert cq.list(name="redteam.keyed") == []


# ---- 7. cairnq_worker: --task suggestions, a registry with no handler ------------------------


def test_task_flag_suggests_the_closest_registered_names(cairnq_db: Any) -> None:
    with pytest.raises(CommandError) as refused:
        call_command("cairnq_worker", "--burst", "--task", "demo.noop", "--task", "demo.nop", "--task", "zzzzzz")
    message = str(refused.value)
    assert message.startswith("--task: no handler registered for 'demo.nop' (did you mean 'demo.noop'")
    assert "'zzzzzz'; registered: " in message


def test_a_project_with_no_handler_is_warned_and_its_worker_refuses(tmp_path: Path) -> None:
    with scratch_database() as database:
        project = start_project(tmp_path / "site", database)
        project.install("cairnq_django", "blog")
        project.write("blog/__init__.py", "")
        checked = project.ok("check")
        assert "cairnq.W022" in checked.stderr + checked.stdout
        assert "installed apps without a tasks module: blog" in checked.stderr + checked.stdout
        refused = project.manage("cairnq_worker", "--burst")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "no installed app declares a task with @cairnq.task (installed apps without a tasks module: blog)" in refused.stderr
        assert "INSTALLED_APPS" in refused.stderr and 'CAIRNQ["FOREIGN_TASKS"]' in refused.stderr
        assert "Traceback" not in refused.stderr

        # Told that other SDKs' workers run the tasks: no warning, and a housekeeping worker starts.
        project.append_settings('CAIRNQ = {"FOREIGN_TASKS": ["ts.*"]}\n')
        checked = project.ok("check")
        assert "cairnq.W022" not in checked.stderr + checked.stdout
        project.ok("migrate")
        started = project.ok("cairnq_worker", "--burst")
        assert "handlers: (none registered)" in started.stdout
        assert "no task handler registered: this worker claims nothing and runs housekeeping only" in started.stderr


# ---- 8. cairnq_worker --help ------------------------------------------------------------------


def test_worker_help_gives_the_true_defaults() -> None:
    parser = cairnq_worker.Command().create_parser("manage.py", "cairnq_worker")
    text = " ".join(parser.format_help().split())
    assert "150 by default" not in text
    assert 'Lease per claim and per heartbeat (default CAIRNQ["LEASE_MS"], 30000)' in text
    assert "so at least 150 with the default heartbeat" in text
    for key in ("CONCURRENCY", "CLAIM_AHEAD", "POLL_INTERVAL_MS", "RETRY_BACKOFF_MS", "RETRY_BACKOFF_MAX_MS"):
        assert f'CAIRNQ["{key}"], {conf.DEFAULTS[key]})' in text or f'CAIRNQ["{key}"], {conf.DEFAULTS[key]};' in text, key
    assert 'CAIRNQ["DRAIN_TIMEOUT"], 30)' in text
    assert 'CAIRNQ["METRICS_HOST"], 127.0.0.1: this host only' in text
    assert "default 0.0.0.0" not in text
