"""``cairnq_purge``, ``cairnq_stats`` and the retention sweep delete and count the right rows.

Pins: a purge that deletes a live (queued or running) task, ignores a filter
or the cutoff, deletes in one unbounded statement, or deletes on a dry run;
bad flag values that pass silently or fail without naming the flag; stats
that miss a queue or a status; a ``RETENTION`` setting read wrongly.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from cairnq_django.models import Task
from cairnq_django.client.retention import (
    PurgeRule,
    next_batch_limit,
    parse_duration_ms,
    parse_rules,
    purge_rule,
    sweep,
)

from . import make_task

DAY_MS = 86_400_000


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def age(task_id: str, days: float, now_ms: int) -> None:
    """Pretend a finished task completed ``days`` ago (and a live one was created then)."""
    then = now_ms - int(days * DAY_MS)
    rows = Task.objects.filter(pk=task_id)
    if rows.get().completed_at_ms is not None:
        rows.update(completed_at_ms=then)
    rows.update(created_at_ms=then)


@pytest.fixture
def aged(store: Any) -> dict[str, str]:
    """Ten-day-old tasks of every state, plus one recent succeeded task."""
    now_ms = store.now_ms()
    made = {
        "succeeded": make_task(store, "succeeded").id,
        "failed": make_task(store, "failed").id,
        "canceled": make_task(store, "canceled").id,
        "queued": make_task(store, "queued").id,
        "running": make_task(store, "running").id,
        "other_queue": make_task(store, "succeeded", queue="reports").id,
        "other_name": make_task(store, "failed", name="admin.other").id,
    }
    for task_id in made.values():
        age(task_id, 10, now_ms)
    made["recent"] = make_task(store, "succeeded").id
    return made


def remaining(made: dict[str, str]) -> set[str]:
    present = set(Task.objects.filter(pk__in=made.values()).values_list("pk", flat=True))
    return {label for label, task_id in made.items() if task_id in present}


@pytest.mark.parametrize("text,expected", [("500ms", 500), ("30s", 30_000), ("30m", 1_800_000), ("12h", 43_200_000), ("7d", 7 * DAY_MS), ("2w", 14 * DAY_MS)])
def test_parse_duration(text: str, expected: int) -> None:
    assert parse_duration_ms(text) == expected


@pytest.mark.parametrize("text", ["7", "", "-1d", "1.5h", "7 days", "d"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_ms(text)


def test_purge_deletes_old_terminal_tasks_only(aged: dict[str, str]) -> None:
    out = run("cairnq_purge", "--older-than", "7d")
    assert remaining(aged) == {"queued", "running", "recent"}
    assert "purged 5 task(s)" in out


def test_purge_never_deletes_live_tasks_even_with_zero_cutoff(aged: dict[str, str], store: Any) -> None:
    # The cutoff is strict (protocol 3.8): a task completed in this very
    # millisecond is not yet older than 0 ms, so let the clock move on first.
    recent_ms = Task.objects.get(pk=aged["recent"]).completed_at_ms
    while store.now_ms() <= recent_ms:
        time.sleep(0.001)
    run("cairnq_purge", "--older-than", "0ms")
    assert remaining(aged) == {"queued", "running"}


@pytest.mark.parametrize(
    ("flags", "left"),
    [
        (["--status", "failed"], {"succeeded", "canceled", "other_queue"}),
        (["--status", "failed", "--status", "canceled"], {"succeeded", "other_queue"}),
        (["--queue", "reports"], {"succeeded", "failed", "canceled", "other_name"}),
        (["--name", "admin.other"], {"succeeded", "failed", "canceled", "other_queue"}),
        (["--queue", "reports", "--status", "failed"], {"succeeded", "failed", "canceled", "other_queue", "other_name"}),
    ],
)
def test_purge_filters(aged: dict[str, str], flags: list[str], left: set[str]) -> None:
    run("cairnq_purge", "--older-than", "7d", *flags)
    assert remaining(aged) == left | {"queued", "running", "recent"}


def test_purge_works_in_bounded_batches_with_progress(aged: dict[str, str]) -> None:
    with CaptureQueriesContext(connections["default"]) as queries:
        out = run("cairnq_purge", "--older-than", "7d", "--batch-size", "2")
    assert remaining(aged) == {"queued", "running", "recent"}
    # 5 rows in batches of at most 2 (2 + 2 + 1, unless a statement took over
    # 50 ms and the next was cut to 1), each batch its own statement.
    batches = re.findall(r"purged (\d+) terminal task\(s\) \((\d+) so far\)", out)
    sizes = [int(count) for count, _ in batches]
    assert sizes[0] == 2 and all(1 <= size <= 2 for size in sizes) and sum(sizes) == 5
    assert [int(so_far) for _, so_far in batches] == list(itertools.accumulate(sizes))
    deletes = [q["sql"] for q in queries.captured_queries if "DELETE FROM cairnq_tasks" in q["sql"]]
    # A full last batch is followed by an empty one, which prints nothing.
    assert len(deletes) in (len(sizes), len(sizes) + 1)


def test_purge_dry_run_deletes_nothing(aged: dict[str, str]) -> None:
    out = run("cairnq_purge", "--older-than", "7d", "--status", "failed", "--dry-run")
    assert "would purge 2 failed task(s)" in out
    assert "dry run: 2 task(s) would be purged" in out
    assert len(remaining(aged)) == len(aged)


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        (["--older-than", "7"], "--older-than"),
        (["--older-than", "soon"], "--older-than"),
        (["--older-than", "7d", "--status", "queued"], "--status"),
        (["--older-than", "7d", "--status", "running"], "--status"),
        (["--older-than", "7d", "--batch-size", "0"], "--batch-size"),
        (["--older-than", "7d", "--batch-size", "many"], "--batch-size"),
        (["--older-than", "7d", "--queue", ""], "--queue"),
        ([], "--older-than"),
    ],
)
def test_purge_bad_values_name_the_flag(aged: dict[str, str], flags: list[str], flag: str) -> None:
    with pytest.raises(CommandError, match=re.escape(flag)):
        run("cairnq_purge", *flags)
    assert len(remaining(aged)) == len(aged)


def test_stats_text_and_json(store: Any) -> None:
    make_task(store, "queued")
    make_task(store, "failed")
    make_task(store, "queued", queue="reports")
    data = json.loads(run("cairnq_stats", "--json"))
    assert data == {
        "default": {"queued": 1, "running": 0, "succeeded": 0, "failed": 1, "canceled": 0},
        "reports": {"queued": 1, "running": 0, "succeeded": 0, "failed": 0, "canceled": 0},
    }
    assert json.loads(run("cairnq_stats", "--json", "--queue", "empty")) == {
        "empty": {"queued": 0, "running": 0, "succeeded": 0, "failed": 0, "canceled": 0}
    }
    lines = run("cairnq_stats").splitlines()
    assert lines[0].split() == ["queue", "queued", "running", "succeeded", "failed", "canceled", "total"]
    assert lines[1].split() == ["default", "1", "0", "0", "1", "0", "2"]
    assert lines[2].split() == ["reports", "1", "0", "0", "0", "0", "1"]
    assert run("cairnq_stats", "--queue", "reports").splitlines()[1:] == [lines[2]]


@pytest.mark.parametrize(
    ("value", "rules"),
    [
        (None, []),
        (3_600_000, [PurgeRule(3_600_000)]),
        ({"succeeded": 1000, "failed": 2000}, [PurgeRule(1000, status="succeeded"), PurgeRule(2000, status="failed")]),
        ([{"older_than_ms": 5, "queue": "q", "name": "n"}], [PurgeRule(5, queue="q", name="n")]),
    ],
)
def test_retention_setting_shapes(value: Any, rules: list[PurgeRule]) -> None:
    assert parse_rules(value) == rules


@pytest.mark.parametrize(
    "value",
    [-1, True, "7d", {}, [], {"queued": 1000}, {"failed": -5}, [{"status": "failed"}], [{"older_than_ms": 1, "when": 2}]],
)
def test_retention_setting_refuses(value: Any) -> None:
    with pytest.raises(ImproperlyConfigured):
        parse_rules(value)


def test_sweep_follows_the_setting_in_bounded_batches(store: Any, aged: dict[str, str]) -> None:
    with override_settings(CAIRNQ={"RETENTION": None}):
        assert sweep(store) == 0
    assert len(remaining(aged)) == len(aged)

    with override_settings(CAIRNQ={"RETENTION": {"failed": 7 * DAY_MS}}):
        assert sweep(store, limit=1) == 2
    assert remaining(aged) == {"succeeded", "canceled", "queued", "running", "other_queue", "recent"}

    with override_settings(CAIRNQ={"RETENTION": 7 * DAY_MS}), CaptureQueriesContext(connections["default"]) as queries:
        assert sweep(store, limit=2) == 3
    assert remaining(aged) == {"queued", "running", "recent"}
    # 3 rows, limit 2: one full batch, then a short one ends the rule (or, had the
    # first taken over 50 ms, a full batch of 1 and an empty one).
    assert len([q for q in queries.captured_queries if "DELETE FROM cairnq_tasks" in q["sql"]]) in (2, 3)


def test_sweep_stops_between_batches_when_asked(store: Any, aged: dict[str, str]) -> None:
    deleted = sweep(store, limit=1, rules=[PurgeRule(7 * DAY_MS)], should_stop=lambda: True)
    assert deleted == 1


@pytest.mark.parametrize(
    ("limit", "took_s", "expected"),
    [
        (1000, 0.5, 100),  # ten times too long: a tenth the rows
        (1000, 0.2, 250),
        (3, 60.0, 1),  # never below one row
        (100, 0.01, 200),  # well under the target: doubled
        (800, 0.001, 1000),  # ... up to the ceiling
        (100, 0.04, 100),  # near the target: kept
    ],
)
def test_a_purge_batch_is_sized_to_its_time_target(limit: int, took_s: float, expected: int) -> None:
    assert next_batch_limit(limit, took_s, ceiling=1000, target_s=0.05) == expected


def test_batches_that_overrun_their_target_shrink(store: Any, aged: dict[str, str]) -> None:
    # With a target no batch can meet, the first batch has the full limit and
    # every later one a single row; the rule still ends with every old row gone.
    sizes: list[int] = []
    deleted = purge_rule(store, PurgeRule(7 * DAY_MS), limit=3, on_batch=sizes.append, target_s=0.0)
    assert deleted == 5 and sizes == [3, 1, 1, 0]
    assert remaining(aged) == {"queued", "running", "recent"}


def test_a_sweep_goes_on_from_where_its_last_batch_ended(store: Any) -> None:
    # Each batch's index range starts at the last batch's latest completion: a
    # row finished before that, appearing mid-sweep, waits for the next sweep.
    now_ms = store.now_ms()
    made = [make_task(store, "succeeded").id for _ in range(4)]
    for days, task_id in zip((10, 9, 8, 7.5), made):
        age(task_id, days, now_ms)
    late: list[str] = []

    def after_batch(count: int) -> None:
        if not late:
            late.append(make_task(store, "failed").id)
            age(late[0], 20, now_ms)

    rule = PurgeRule(7 * DAY_MS)
    assert purge_rule(store, rule, limit=2, on_batch=after_batch, target_s=60.0) == 4
    assert list(Task.objects.filter(pk__in=made + late).values_list("pk", flat=True)) == late
    assert purge_rule(store, rule, limit=2) == 1
    assert not Task.objects.filter(pk__in=late).exists()


def test_a_sweep_rests_between_batches_in_proportion_to_them(store: Any, aged: dict[str, str]) -> None:
    # Background work: after each full batch a sweep sleeps ``rest`` times that
    # batch's duration; the last batch (short: nothing left) needs no rest.
    rests: list[float] = []
    deleted = purge_rule(store, PurgeRule(7 * DAY_MS), limit=2, rest=2.0, sleep=rests.append, target_s=60.0)
    assert deleted == 5 and len(rests) == 2 and all(r > 0 for r in rests)
    assert purge_rule(store, PurgeRule(7 * DAY_MS), limit=2, sleep=rests.append) == 0 and len(rests) == 2
