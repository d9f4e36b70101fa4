"""Pin periodic tasks: the cron parser (fields, lists, ranges, steps, names, macros,
Vixie day-of-month/day-of-week OR rule, leap days, expressions that never match,
errors naming the field -- cross-checked against a minute-by-minute search), and
``periodic.tick`` on the real database: each due tick enqueued exactly once however
many workers tick at once, a first sighting starting with the next tick, only the
most recent missed tick enqueued, a purged tick never enqueued again, the protocol
key and metadata on each tick's task, ``CAIRNQ["SCHEDULE"]`` merged with
``@periodic`` (invalid entries reported, None disabling), and Django tasks ticking
with an empty call."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections

import cairnq_django as cq
from cairnq_django.tasks import periodic, registry
from cairnq_django.protocol.cron import CronError, parse
from cairnq_django.models import ProtocolMeta

UTC = dt.timezone.utc
MINUTE = 60_000


def ms(*parts: int) -> int:
    return int(dt.datetime(*parts, tzinfo=UTC).timestamp() * 1000)


def iso(value: int | None) -> str | None:
    return None if value is None else dt.datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d %H:%M %a")


# ---------------------------------------------------------------- the parser
@pytest.mark.parametrize(
    ("expression", "now", "previous", "following"),
    [
        ("*/5 * * * *", ms(2026, 3, 1, 10, 7, 30), ms(2026, 3, 1, 10, 5), ms(2026, 3, 1, 10, 10)),
        ("*/5 * * * *", ms(2026, 3, 1, 10, 5), ms(2026, 3, 1, 10, 5), ms(2026, 3, 1, 10, 10)),
        ("0 9-17/4 * * mon-fri", ms(2026, 3, 2, 8, 0), ms(2026, 2, 27, 17, 0), ms(2026, 3, 2, 9, 0)),
        ("30 2 * * 7", ms(2026, 3, 4, 0, 0), ms(2026, 3, 1, 2, 30), ms(2026, 3, 8, 2, 30)),
        ("15,45 */6 1 jan,jul *", ms(2026, 3, 1), ms(2026, 1, 1, 18, 45), ms(2026, 7, 1, 0, 15)),
        ("0 12 29 2 *", ms(2027, 3, 1), ms(2024, 2, 29, 12, 0), ms(2028, 2, 29, 12, 0)),
        ("5/20 * * * *", ms(2026, 3, 1, 10, 50), ms(2026, 3, 1, 10, 45), ms(2026, 3, 1, 11, 5)),
        ("@daily", ms(2026, 12, 31, 23, 59), ms(2026, 12, 31), ms(2027, 1, 1)),
        ("@hourly", ms(2026, 3, 1, 10, 0, 0, 1000), ms(2026, 3, 1, 10), ms(2026, 3, 1, 11)),
    ],
)
def test_previous_and_next(expression: str, now: int, previous: int, following: int) -> None:
    cron = parse(expression)
    assert iso(cron.previous(now)) == iso(previous)
    assert iso(cron.next(now)) == iso(following)


def test_day_of_month_or_day_of_week() -> None:
    cron = parse("0 0 13 * fri")  # every 13th AND every Friday (Vixie cron)
    assert cron.matches(ms(2026, 3, 13))  # a Friday the 13th
    assert cron.matches(ms(2026, 4, 13))  # a Monday
    assert cron.matches(ms(2026, 4, 3))  # a Friday
    assert not cron.matches(ms(2026, 4, 4))
    star_step = parse("0 0 */2 * fri")  # "*/2" counts as unrestricted: both must match
    assert star_step.matches(ms(2026, 4, 3)) and not star_step.matches(ms(2026, 4, 10))


def test_never_matching_expression() -> None:
    cron = parse("0 0 31 2 *")
    assert cron.previous(ms(2026, 1, 1)) is None and cron.next(ms(2026, 1, 1)) is None


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("* * * *", "has 4 fields"),
        ("60 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day of month"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day of week"),
        ("*/0 * * * *", "step"),
        ("5-1 * * * *", "backwards"),
        ("a * * * *", "not a number"),
        ("1,,2 * * * *", "empty list item"),
        ("* * * foo *", "jan"),
    ],
)
def test_errors_name_the_field(expression: str, fragment: str) -> None:
    with pytest.raises(CronError, match=fragment):
        parse(expression)


def test_agrees_with_a_minute_by_minute_search() -> None:
    rng = random.Random(20261129)
    fields = [
        ["*", "*/7", "0", "5-20/5", "0,30", "59"],
        ["*", "*/5", "0", "9-17", "23", "1,13"],
        ["*", "1", "15", "*/10", "28-31"],
        ["*", "2", "*/3", "jan-mar", "12"],
        ["*", "0", "mon-fri", "6,0", "3"],
    ]
    start = ms(2026, 1, 27)
    for _ in range(25):
        expression = " ".join(rng.choice(options) for options in fields)
        cron = parse(expression)
        now = start + rng.randrange(0, 10 * 24 * 60) * MINUTE + rng.randrange(0, MINUTE)
        expected_prev = next((t for t in range(now - now % MINUTE, now - 40 * 24 * 60 * MINUTE, -MINUTE) if cron.matches(t)), None)
        expected_next = next((t for t in range(now - now % MINUTE + MINUTE, now + 40 * 24 * 60 * MINUTE, MINUTE) if cron.matches(t)), None)
        if expected_prev is not None:
            assert cron.previous(now) == expected_prev, expression
        if expected_next is not None:
            assert cron.next(now) == expected_next, expression


# ---------------------------------------------------------------- tick on the database
NAME = "tests.native.periodic.job"


def clear_markers(alias: str = "default") -> None:
    ProtocolMeta.objects.using(alias).filter(key__startswith=periodic.MARKER_PREFIX).delete()


@pytest.fixture
def clean(cairnq_db: Any, settings: Any) -> Iterator[Any]:
    clear_markers()
    periodic.forget()
    definition = registry.task(NAME)(lambda ctx: "ticked")
    settings.CAIRNQ = {**settings.CAIRNQ, "SCHEDULE": {NAME: "*/5 * * * *"}}
    yield settings
    registry.unregister(NAME)
    periodic.forget()
    clear_markers()
    del definition


def rows(name: str = NAME) -> list[Any]:
    return sorted(cq.list(name=name, limit=1000), key=lambda row: row.metadata["tick_ms"])


def test_first_sighting_waits_for_the_next_tick(clean: Any, store: Any) -> None:
    assert periodic.tick(store, ms(2026, 3, 1, 10, 7)) == []
    assert rows() == []
    # same tick again (another call, same process or not): still nothing
    periodic.forget()
    assert periodic.tick(store, ms(2026, 3, 1, 10, 9)) == []
    created = periodic.tick(store, ms(2026, 3, 1, 10, 10, 2))
    assert len(created) == 1
    task = created[0]
    tick = ms(2026, 3, 1, 10, 10)
    assert (task.name, task.status, task.queue) == (NAME, "queued", "default")
    assert task.metadata == {"periodic": NAME, "cron": "*/5 * * * *", "tick_ms": tick}
    assert cq.get_by_key(f"periodic:{NAME}:{tick}").id == task.id
    assert periodic.tick(store, ms(2026, 3, 1, 10, 14, 59)) == []


def test_only_the_most_recent_missed_tick_runs(clean: Any, store: Any) -> None:
    periodic.tick(store, ms(2026, 3, 1, 10, 0))
    created = periodic.tick(store, ms(2026, 3, 1, 13, 33))  # 10:05 .. 13:30 were missed
    assert [row.metadata["tick_ms"] for row in created] == [ms(2026, 3, 1, 13, 30)]


def test_a_purged_tick_is_not_enqueued_again(clean: Any, store: Any) -> None:
    periodic.tick(store, ms(2026, 3, 1, 10, 0))
    (task,) = periodic.tick(store, ms(2026, 3, 1, 10, 5))
    cq.cancel(task.id)
    time.sleep(0.005)
    assert cq.purge(older_than_ms=0) == [task.id]
    assert cq.get_by_key(f"periodic:{NAME}:{ms(2026, 3, 1, 10, 5)}") is None  # the key went with it
    periodic.forget()  # as a freshly started worker would
    assert periodic.tick(store, ms(2026, 3, 1, 10, 6)) == []
    assert len(periodic.tick(store, ms(2026, 3, 1, 10, 10))) == 1


class NoMemory(dict):  # type: ignore[type-arg]
    """Stand-in for the in-process tick cache: every call goes to the database."""

    def get(self, key: Any, default: Any = None) -> Any:
        return -1

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def test_concurrent_workers_enqueue_each_tick_once(clean: Any, store: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(periodic, "_seen", NoMemory())
    periodic.tick(store, ms(2026, 3, 1, 9, 55))
    workers, rounds = 6, 8
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []
    created: list[list[str]] = [[] for _ in range(workers)]

    def worker(index: int) -> None:
        try:
            for round_ in range(rounds):
                barrier.wait(timeout=30)
                now = ms(2026, 3, 1, 10, 0) + round_ * 5 * MINUTE + index * 1000
                created[index] += [row.id for row in periodic.tick(store, now)]
        except Exception as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    ticks = [row.metadata["tick_ms"] for row in rows()]
    assert ticks == [ms(2026, 3, 1, 10, 0) + r * 5 * MINUTE for r in range(rounds)]
    assert sum(len(ids) for ids in created) == rounds


PROCESS_SCRIPT = """
import json, os, sys, time
import django
django.setup()
from cairnq_django.tasks import periodic
from cairnq_django.store import get_store
start, step, rounds, go = (int(v) for v in sys.argv[1:5])
while time.time() * 1000 < go:
    time.sleep(0.001)
store = get_store()
ids = []
for r in range(rounds):
    ids += [row.id for row in periodic.tick(store, start + r * step)]
print(json.dumps(ids))
"""


def test_concurrent_worker_processes_enqueue_each_tick_once(clean: Any, store: Any, subprocess_env: dict[str, str]) -> None:
    import json
    import subprocess
    import sys

    periodic.tick(store, ms(2026, 3, 1, 9, 55))
    env = dict(subprocess_env, CAIRNQ_TEST_OVERRIDES=json.dumps({"SCHEDULE": {NAME: "*/5 * * * *"}}))
    # the handler is not registered in the children: tick enqueues by name only
    go = int(time.time() * 1000) + 2500
    rounds = 6
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS_SCRIPT, str(ms(2026, 3, 1, 10, 0)), str(5 * MINUTE), str(rounds), str(go)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(3)
    ]
    created: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        created += json.loads(out.strip().splitlines()[-1])
    ticks = [row.metadata["tick_ms"] for row in rows()]
    assert ticks == [ms(2026, 3, 1, 10, 0) + r * 5 * MINUTE for r in range(rounds)]
    assert sorted(created) == sorted(row.id for row in rows())


def test_schedule_setting_merges_with_the_decorator(clean: Any, store: Any) -> None:
    decorated = "tests.native.periodic.decorated"

    @cq.periodic("0 * * * *", name=decorated, queue="hourly", priority=5, payload={"x": 1})
    def hourly(ctx: Any, payload: Any) -> None:
        return None

    try:
        assert isinstance(hourly, registry.TaskDefinition) and hourly.name == decorated
        clean.CAIRNQ = {
            **clean.CAIRNQ,
            "SCHEDULE": {
                NAME: {"cron": "*/10 * * * *", "queue": "tens"},
                "bad.cron": "61 * * * *",
                "bad.option": {"cron": "* * * * *", "color": "red"},
                "never": "0 0 31 2 *",
            },
        }
        found = {s.name: s for s in periodic.schedules()}
        assert set(found) == {NAME, decorated}
        assert (found[decorated].queue, found[decorated].priority, found[decorated].payload) == ("hourly", 5, {"x": 1})
        problems = periodic.schedule_errors()
        assert len(problems) == 3
        assert any("bad.cron" in p and "minute" in p for p in problems)
        assert any("color" in p for p in problems)
        assert any("never" in p and "never matches" in p for p in problems)

        periodic.tick(store, ms(2026, 3, 1, 10, 1))
        created = periodic.tick(store, ms(2026, 3, 1, 11, 0))
        assert sorted((row.name, row.queue, row.priority) for row in created) == [
            (decorated, "hourly", 5),
            (NAME, "tens", 0),
        ]

        clean.CAIRNQ = {**clean.CAIRNQ, "SCHEDULE": {decorated: None}}  # None disables
        assert [s.name for s in periodic.schedules()] == []
    finally:
        with periodic._lock:
            periodic._decorated.pop(decorated, None)
        registry.unregister(decorated)


def test_ticker_runs_at_most_once_per_interval(clean: Any, store: Any) -> None:
    ticker = periodic.Ticker(store, interval_s=3600)
    assert ticker.maybe_tick() == []  # first sighting
    clear_markers()
    assert ticker.maybe_tick() == []  # too soon: not even a query
    assert ProtocolMeta.objects.filter(key=periodic.marker_key(NAME)).count() == 0


def test_django_task_ticks_with_an_empty_call(clean: Any, store: Any) -> None:
    pytest.importorskip("cairnq_django.backends")
    from cairnq_django.testing import run_until_idle
    from testproject.native import tasks

    name = tasks.attempt_number.module_path
    try:
        periodic.periodic("*/5 * * * *")(tasks.attempt_number)
        periodic.tick(store, ms(2026, 3, 1, 10, 0))
        (row,) = [r for r in periodic.tick(store, ms(2026, 3, 1, 10, 5)) if r.name == name]
        assert row.payload == {"args": [], "kwargs": {}}
        run_until_idle(names=[name])
        assert tasks.attempt_number.get_result(row.id).return_value == 1
    finally:
        with periodic._lock:
            periodic._decorated.pop(name, None)


def test_a_typo_fails_at_import() -> None:
    with pytest.raises(CronError):
        cq.periodic("*/5 * * *")
    assert connection.vendor in ("sqlite", "postgresql")


@pytest.mark.parametrize(
    "first",
    ["import cairnq_django.tasks.periodic", "from cairnq_django import periodic", "import cairnq_django as c; c.periodic"],
)
def test_the_export_is_the_decorator_whatever_was_imported_first(first: str, subprocess_env: dict[str, str]) -> None:
    # cairnq_django.periodic is the decorator; the module beside it
    # (cairnq_django.tasks.periodic) holds tick, Ticker and the schedule reads.
    import subprocess
    import sys

    script = (
        "import django; django.setup()\n"
        f"{first}\n"
        "import cairnq_django as cq\n"
        "from cairnq_django import periodic as p\n"
        "import cairnq_django.tasks.periodic as m\n"
        "assert cq.periodic is p is m.periodic, (cq.periodic, p, m)\n"
        "assert callable(p) and callable(m.tick)\n"
        "print(p('*/5 * * * *', name='x.y')(lambda ctx: None).name)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env=subprocess_env, check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "x.y"


def _worker_ticks() -> bool:
    import inspect

    from cairnq_django.worker import loop

    return "maybe_tick" in inspect.getsource(loop)


@pytest.mark.skipif(not _worker_ticks(), reason="cairnq_worker does not call periodic.Ticker.maybe_tick() yet")
def test_a_running_worker_enqueues_and_runs_the_due_tick(clean: Any, store: Any, subprocess_env: dict[str, str]) -> None:
    import json
    import subprocess
    import sys

    pytest.importorskip("cairnq_django.backends")
    from pathlib import Path

    name = "testproject.native.tasks.attempt_number"
    due = parse("* * * * *").previous(store.now_ms())
    ProtocolMeta.objects.create(key=periodic.marker_key(name), value=str(due - 5 * MINUTE))
    env = dict(subprocess_env, CAIRNQ_TEST_OVERRIDES=json.dumps({"SCHEDULE": {name: "* * * * *"}}))
    proc = subprocess.run(
        [sys.executable, "manage.py", "cairnq_worker", "--burst", "--poll-interval-ms", "50"],
        cwd=Path(__file__).resolve().parents[2], env=env, check=False, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (row,) = cq.list(name=name)
    assert row.metadata["tick_ms"] >= due  # the latest tick only, not the 4 missed before it
    assert (row.status, row.result) == ("succeeded", 1)


def test_a_django_task_on_another_backend_is_refused(settings: Any) -> None:
    backends = pytest.importorskip("cairnq_django.backends")
    settings.TASKS = {
        **settings.TASKS,
        "elsewhere": {"BACKEND": f"{backends.FRAMEWORK}.backends.dummy.DummyBackend"},
    }

    def report() -> None:
        return None

    report.__qualname__ = "report_on_dummy"  # module level for Django's validation
    on_dummy = backends.django_task(report, backend="elsewhere")
    with pytest.raises(TypeError, match="CairnqBackend"):
        cq.periodic("@daily")(on_dummy)
