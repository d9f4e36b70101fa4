"""Pin the boundary rules (cairnq_django/bounds.py) on both dialects: every integer
the API, the django.tasks backend and the commands take is accepted at its minimum
and maximum and refused one past either end with a ValueError (CommandError for a
command) naming the argument; text with NUL or a lone surrogate is refused the same
way; nothing is written and the caller's atomic() block still runs queries after
a refusal. Also ctx.progress()'s range, and the resource check that warns instead
of failing ``check``/``migrate`` while the worker still refuses to start."""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

import cairnq_django as cq
from cairnq_django.client.submit import build_spec
from cairnq_django.protocol import bounds
from cairnq_django.worker.attempt import Attempt, AttemptOwner
from cairnq_django.exceptions import SerializationError
from cairnq_django.protocol.payload import encode
from cairnq_django.store.base import SubmitSpec

REPO = Path(__file__).resolve().parent.parent
WORKER = "worker_bounds"
INT4_MIN, INT4_MAX, INT8_MAX = bounds.INT4_MIN, bounds.INT4_MAX, bounds.INT8_MAX
MAX_DELAY = bounds.MAX_DELAY_MS


def row_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM cairnq_tasks")
        return int(cursor.fetchone()[0])


def refused_inside_atomic(call: Callable[[], Any], label: str, error: type[Exception] = ValueError) -> None:
    """``call`` raises ``error`` naming ``label``, writes nothing, and leaves the atomic block usable."""
    before = row_count()
    with transaction.atomic():
        with pytest.raises(error) as caught:
            call()
        assert label in str(caught.value), caught.value
        # PostgreSQL aborts a transaction whose statement failed; a refusal in
        # Python must leave it running.
        with connection.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM cairnq_tasks")
            assert int(cursor.fetchone()[0]) == before
    assert row_count() == before


def finished_task(store: Any) -> str:
    task = cq.submit("bounds.done", {}, queue="bounds-done")
    (claimed,) = store.claim(["bounds-done"], WORKER, lease_ms=30_000)
    store.complete(claimed.id, WORKER, encode({"ok": True}))
    return str(task.id)


# ------------------------------------------------------------------ submit integers
SUBMIT_INTS = [
    ("priority", INT4_MIN, INT4_MAX),
    ("max_attempts", 1, INT4_MAX),
    ("delay_ms", 0, MAX_DELAY),
]


@pytest.mark.parametrize(("option", "low", "high"), SUBMIT_INTS)
def test_submit_integers_at_their_bounds(cairnq_db: Any, option: str, low: int, high: int) -> None:
    for bad in (low - 1, high + 1, 2**64, True, 1.0):
        refused_inside_atomic(lambda bad=bad: cq.submit("bounds.x", {}, **{option: bad}), option)
    with transaction.atomic():
        rows = [cq.submit("bounds.x", {}, **{option: good}) for good in (low, high)]
        # Still usable: the row reads back with the value as given.
        assert [getattr(cq.get(row.id), option, None) for row in rows if option != "delay_ms"] == (
            [] if option == "delay_ms" else [low, high]
        )
    assert row_count() == 2


def test_delay_at_the_maximum_stays_a_showable_time(cairnq_db: Any) -> None:
    row = cq.submit("bounds.later", {}, delay_ms=MAX_DELAY)
    stored = cq.get(row.id)
    assert stored is not None
    # 100 years from now: inside int8 and inside Python's datetime.
    due = dt.datetime.fromtimestamp(stored.run_at_ms / 1000, tz=dt.timezone.utc)
    assert 2100 < due.year < 9999


def test_submit_many_checks_shared_options_and_each_item(cairnq_db: Any) -> None:
    refused_inside_atomic(lambda: cq.submit_many([], priority=INT4_MAX + 1), "priority")
    refused_inside_atomic(lambda: cq.submit_many([("bounds.a", {})], max_attempts=0), "max_attempts")
    # The bad item is the third: the two before it are not written either.
    items = [{"name": "bounds.a"}, {"name": "bounds.b"}, {"name": "bounds.c", "delay_ms": MAX_DELAY + 1}]
    refused_inside_atomic(lambda: cq.submit_many(items), "delay_ms")
    pairs_then_bad = [("bounds.a", {}), ("bounds.b", {}), {"name": "bounds.c", "priority": INT4_MIN - 1}]
    refused_inside_atomic(lambda: cq.submit_many(pairs_then_bad), "priority")
    rows = cq.submit_many([("bounds.a", {})], priority=INT4_MIN, max_attempts=INT4_MAX, delay_ms=MAX_DELAY)
    assert (rows[0].priority, rows[0].max_attempts) == (INT4_MIN, INT4_MAX)


def test_a_hand_built_spec_meets_the_same_rule_in_the_store(store: Any) -> None:
    spec = build_spec("bounds.x", {})
    fields = {**spec.__dict__, "priority": INT4_MAX + 1}
    refused_inside_atomic(lambda: store.submit(SubmitSpec(**fields)), "priority")
    fields = {**spec.__dict__, "delay_ms": MAX_DELAY + 1}
    refused_inside_atomic(lambda: store.submit_many([SubmitSpec(**fields)]), "delay_ms")


# ------------------------------------------------------------------ reads and purge
@pytest.mark.parametrize(
    ("call", "label", "low", "high"),
    [
        (lambda n: cq.list(limit=n), "limit", 0, INT8_MAX),
        (lambda n: cq.list(offset=n), "offset", 0, INT8_MAX),
        (lambda n: cq.queue_depth("bounds", n), "max_depth", 0, INT8_MAX),
        (lambda n: cq.purge(older_than_ms=n), "older_than_ms", 0, MAX_DELAY),
        (lambda n: cq.purge(limit=n), "limit", 1, INT8_MAX),
    ],
    ids=["list-limit", "list-offset", "queue_depth", "purge-age", "purge-limit"],
)
def test_read_and_purge_integers_at_their_bounds(
    store: Any, call: Callable[[int], Any], label: str, low: int, high: int
) -> None:
    finished_task(store)
    for bad in (low - 1, high + 1):
        refused_inside_atomic(lambda bad=bad: call(bad), label)
    with transaction.atomic():
        for good in (low, high):
            call(good)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    assert cq.queue_depth("bounds", INT8_MAX) == INT8_MAX


def test_wait_arguments_at_their_bounds(store: Any) -> None:
    task_id = finished_task(store)
    for kwargs, label in (
        ({"poll_ms": 0}, "poll_ms"),
        ({"poll_ms": bounds.MAX_TIMER_MS + 1}, "poll_ms"),
        ({"max_poll_ms": 0}, "max_poll_ms"),
        ({"max_poll_ms": bounds.MAX_TIMER_MS + 1}, "max_poll_ms"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": math.nan}, "timeout"),
        ({"timeout": math.inf}, "timeout"),
        ({"timeout": bounds.MAX_TIMEOUT_S + 1}, "timeout"),
    ):
        refused_inside_atomic(lambda kwargs=kwargs: cq.wait(task_id, **kwargs), label)
        refused_inside_atomic(lambda kwargs=kwargs: cq.call("bounds.x", {}, **kwargs), label)
    for kwargs in (
        {"poll_ms": 1, "max_poll_ms": bounds.MAX_TIMER_MS},
        {"poll_ms": bounds.MAX_TIMER_MS},
        {"timeout": 0},
        {"timeout": bounds.MAX_TIMEOUT_S},
        {"timeout": None},
    ):
        assert cq.wait(task_id, **kwargs).status == "succeeded"


# ------------------------------------------------------------------ text
TEXT_BAD = [("\x00", "NUL"), ("\ud800", "lone surrogate"), ("a\udcff", "lone surrogate")]


@pytest.mark.parametrize(("bad", "rule"), TEXT_BAD, ids=["nul", "surrogate", "escaped-byte"])
def test_text_arguments_with_nul_or_a_lone_surrogate(cairnq_db: Any, bad: str, rule: str) -> None:
    text = f"bounds{bad}x"
    for field in ("name", "queue", "key", "correlation_id", "parent_id", "root_id"):
        kwargs = {"name": "bounds.x", field: text}
        name = kwargs.pop("name")
        refused_inside_atomic(lambda name=name, kwargs=kwargs: cq.submit(name, {}, **kwargs), field)
        refused_inside_atomic(
            lambda name=name, kwargs=kwargs: cq.submit_many([{"name": name, **kwargs}]), field
        )
        pattern = f"{field} must not contain (NUL|a lone surrogate)"
        with pytest.raises(ValueError, match=pattern):
            cq.submit(name, {}, **kwargs)
    refused_inside_atomic(lambda: cq.submit_many([("bounds.a", {}), (text, {})]), "name")
    for field in ("queue", "name", "root_id", "correlation_id"):
        refused_inside_atomic(lambda field=field: cq.list(**{field: text}), field)
    for call, label in (
        (lambda: cq.get(text), "task_id"),
        (lambda: cq.get_status(text), "task_id"),
        (lambda: cq.get_by_key(text), "key"),
        (lambda: cq.get_status_by_key(text), "key"),
        (lambda: cq.cancel(text), "task_id"),
        (lambda: cq.cancel_by_key(text), "key"),
        (lambda: cq.retry(text), "task_id"),
        (lambda: cq.retry_by_key(text), "key"),
        (lambda: cq.wait(text, timeout=0), "task_id"),
        (lambda: cq.wait_by_key(text, timeout=0), "key"),
        (lambda: cq.stats(text), "queue"),
        (lambda: cq.queue_depth(text, 5), "queue"),
        (lambda: cq.purge(queue=text), "queue"),
        (lambda: cq.purge(name=text), "name"),
    ):
        refused_inside_atomic(call, label)


def test_lone_surrogates_inside_a_payload_are_a_serialization_error(cairnq_db: Any) -> None:
    for payload, path in (({"text": "a\ud800b"}, "payload['text']"), ({"list": ["ok", "\udfff"]}, "payload['list'][1]")):
        refused_inside_atomic(lambda payload=payload: cq.submit("bounds.x", payload), path, SerializationError)
    refused_inside_atomic(
        lambda: cq.submit("bounds.x", {}, metadata={"who": "\ud83d"}), "metadata['who']", SerializationError
    )


# ------------------------------------------------------------------ django.tasks backend
def test_backend_run_after_past_the_maximum_delay(cairnq_db: Any) -> None:
    backends = pytest.importorskip("cairnq_django.backends")
    from testproject.native import tasks

    assert backends.FRAMEWORK  # the backend is the one the project configures
    far = timezone.now() + dt.timedelta(milliseconds=MAX_DELAY) + dt.timedelta(days=1)
    refused_inside_atomic(lambda: tasks.add.using(run_after=far).enqueue(1, 2), "run_after")
    last = dt.datetime(9999, 12, 31, 23, 59, tzinfo=dt.timezone.utc)
    refused_inside_atomic(lambda: tasks.add.using(run_after=last).enqueue(1, 2), "run_after")
    refused_inside_atomic(lambda: tasks.add.using(queue_name="q\ud800").enqueue(1, 2), "queue_name")
    refused_inside_atomic(lambda: tasks.add.using(queue_name="q\x00").enqueue(1, 2), "queue_name")
    near = timezone.now() + dt.timedelta(milliseconds=MAX_DELAY) - dt.timedelta(days=1)
    result = tasks.add.using(run_after=near).enqueue(1, 2)
    assert cq.get(result.id) is not None


# ------------------------------------------------------------------ ctx.progress
def test_progress_refuses_nan_infinities_and_values_outside_a_fraction(store: Any) -> None:
    cq.submit("bounds.progress", {}, queue="bounds-progress")
    (claimed,) = store.claim(["bounds-progress"], WORKER, lease_ms=30_000)
    ctx = Attempt(claimed, AttemptOwner(store, WORKER, 30_000)).context
    ctx.progress(0.25, "quarter")
    for bad in (math.nan, math.inf, -math.inf, -0.001, 1.001, 10**400, True, "0.5"):
        with transaction.atomic():
            with pytest.raises(ValueError, match="progress"):
                ctx.progress(bad)
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
    for message in ("half\x00way", "half\ud800way"):
        with pytest.raises(ValueError, match="progress message"):
            ctx.progress(0.5, message)
    row = cq.get(claimed.id)
    assert (row.progress, row.message) == (0.25, "quarter")  # nothing refused was written
    assert ctx.progress(0).progress == 0.0
    assert ctx.progress(1.0, "").progress == 1.0


# ------------------------------------------------------------------ commands
def test_purge_command_bounds(cairnq_db: Any) -> None:
    weeks = MAX_DELAY // 604_800_000
    with pytest.raises(CommandError, match="--older-than"):
        call_command("cairnq_purge", "--older-than", f"{weeks + 1}w")
    with pytest.raises(CommandError, match="--older-than"):
        call_command("cairnq_purge", "--older-than", "9" * 5000 + "d")
    with pytest.raises(CommandError, match="--queue"):
        call_command("cairnq_purge", "--older-than", "1d", "--queue", "q\x00")
    with pytest.raises(CommandError, match="--name"):
        call_command("cairnq_purge", "--older-than", "1d", "--name", "n\ud800")
    call_command("cairnq_purge", "--older-than", f"{weeks}w", verbosity=0)
    call_command("cairnq_purge", "--older-than", "0ms", verbosity=0)


def test_stats_command_refuses_unstorable_queue(cairnq_db: Any) -> None:
    with pytest.raises(CommandError, match="--queue"):
        call_command("cairnq_stats", "--queue", "q\x00")


@pytest.mark.parametrize(
    ("flag", "low", "high"),
    [
        ("--concurrency", 1, bounds.MAX_CONCURRENCY),
        ("--max-run-ms", 1, bounds.MAX_TIMER_MS),
        ("--claim-batch", 1, INT4_MAX),
        ("--claim-ahead", 0, bounds.MAX_CONCURRENCY),
        ("--poll-interval-ms", 1, bounds.MAX_TIMER_MS),
        ("--max-in-flight-bytes", 1, INT8_MAX),
        ("--retry-backoff-ms", 0, bounds.MAX_TIMER_MS),
        ("--retry-backoff-max-ms", 0, bounds.MAX_TIMER_MS),
        ("--max-tasks", 1, INT8_MAX),
        ("--lease-ms", bounds.MIN_LEASE_MS, bounds.MAX_TIMER_MS),
    ],
)
def test_worker_flags_at_their_bounds(cairnq_db: Any, flag: str, low: int, high: int) -> None:
    for bad in (low - 1, high + 1):
        with pytest.raises(CommandError, match=flag):
            call_command("cairnq_worker", flag, str(bad), "--burst", verbosity=0)
    assert row_count() == 0
    for good in (low, high):
        # --burst on an empty queue: parsed, started, and out at once.
        call_command("cairnq_worker", flag, str(good), "--burst", verbosity=0)


def test_worker_lease_floor_follows_the_heartbeat(cairnq_db: Any) -> None:
    with override_settings(CAIRNQ={"RESOURCES": {"gpu": 1}, "GLOBAL_RESOURCES": {"openai": 2}, "HEARTBEAT_INTERVAL_MS": 30}):
        with pytest.raises(CommandError, match="--lease-ms 89 is shorter than three heartbeats"):
            call_command("cairnq_worker", "--lease-ms", "89", "--burst")
        call_command("cairnq_worker", "--lease-ms", "90", "--burst", verbosity=0)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--queue", "q\x00"], "--queue"),
        (["--queue", "q" * 1025], "--queue"),
        (["--task", "t\x00"], "--task"),
        (["--resource", f"gpu={INT4_MAX + 1}"], "--resource"),
        (["--resource", "g\x00=1"], "--resource"),
        (["--drain-timeout", "inf"], "--drain-timeout"),
        (["--drain-timeout", str(bounds.MAX_TIMEOUT_S + 1)], "--drain-timeout"),
        (["--concurrency", "9" * 5000], "--concurrency"),
    ],
)
def test_worker_text_and_other_flags_refused(args: list[str], flag: str) -> None:
    with pytest.raises(CommandError, match=flag):
        call_command("cairnq_worker", *args)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("CONCURRENCY", bounds.MAX_CONCURRENCY + 1),
        ("LEASE_MS", bounds.MAX_TIMER_MS + 1),
        ("POLL_INTERVAL_MS", bounds.MAX_TIMER_MS + 1),
        ("DRAIN_TIMEOUT", math.nan),
        ("QUEUES", ["ok", "bad\x00"]),
        ("QUEUES", ["bad\ud800"]),
        ("RESOURCES", {"gpu": INT4_MAX + 1}),
    ],
)
def test_worker_settings_out_of_range(cairnq_db: Any, setting: str, value: Any) -> None:
    with override_settings(CAIRNQ={"RESOURCES": {"gpu": 1}, setting: value}):
        with pytest.raises(CommandError, match=f'CAIRNQ\\["{setting}"\\]'):
            call_command("cairnq_worker", "--burst")
        ids = {m.id for m in checks.run_checks(tags=["cairnq"])}
    assert ids & {"cairnq.E006", "cairnq.E007", "cairnq.E011"}, ids


def test_worker_queue_with_undecodable_bytes_from_the_command_line(subprocess_env: dict[str, str]) -> None:
    # Bytes that are not UTF-8 reach Python as lone surrogates (surrogateescape).
    done = subprocess.run(
        [sys.executable.encode(), b"manage.py", b"cairnq_worker", b"--burst", b"--queue", b"q\xff"],
        cwd=REPO,
        env=subprocess_env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 2, stderr
    assert "--queue" in stderr and "lone surrogate" in stderr
    assert "Traceback" not in stderr


# ------------------------------------------------------------------ resources declared per host
def _manage(env: dict[str, str], *args: str, overrides: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env={**env, "CAIRNQ_TEST_OVERRIDES": json.dumps(overrides)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_resource_declared_only_on_the_worker_passes_check_and_migrate(subprocess_env: dict[str, str]) -> None:
    # The project's demo.gpu task uses resource "gpu"; this host's settings omit it.
    host = {"RESOURCES": {}}
    checked = _manage(subprocess_env, "check", overrides=host)
    assert checked.returncode == 0, checked.stderr
    assert "cairnq.W010" in checked.stderr and "'gpu'" in checked.stderr
    migrated = _manage(subprocess_env, "migrate", "cairnq", "--noinput", overrides=host)
    assert migrated.returncode == 0, migrated.stderr
    # The worker still refuses to start without it ...
    refused = _manage(subprocess_env, "cairnq_worker", "--burst", overrides=host)
    assert refused.returncode == 1
    assert "'gpu'" in refused.stderr and "not declared" in refused.stderr
    # ... and starts with --resource, as docs/deployment.md suggests per host.
    started = _manage(subprocess_env, "cairnq_worker", "--burst", "--resource", "gpu=2", overrides=host)
    assert started.returncode == 0, started.stderr


def test_task_decorator_refuses_what_submit_would() -> None:
    from cairnq_django.tasks.registry import TaskDefinitionError, unregister

    for options, label in (
        ({"priority": INT4_MAX + 1}, "priority"),
        ({"priority": INT4_MIN - 1}, "priority"),
        ({"max_attempts": INT4_MAX + 1}, "max_attempts"),
        ({"queue": "q\ud800"}, "queue"),
    ):
        with pytest.raises(TaskDefinitionError, match=label):
            cq.task("bounds.decorated", **options)(lambda ctx, payload: None)
    defined = cq.task("bounds.decorated", priority=INT4_MIN, max_attempts=INT4_MAX)(lambda ctx, payload: None)
    assert (defined.priority, defined.max_attempts) == (INT4_MIN, INT4_MAX)
    unregister("bounds.decorated")
