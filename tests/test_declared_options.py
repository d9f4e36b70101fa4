"""Pin issue 35's rule for options by name: a name declared with ``@task`` in this process
gets its declaration's ``queue``, ``priority`` and ``max_attempts`` on every path that
submits by name -- ``submit``, ``submit_many`` (pairs, dicts, shared options), ``call``,
the async twins, ``ctx.submit`` / ``ctx.asubmit`` from a running handler, periodic ticks
from ``CAIRNQ["SCHEDULE"]`` and the ``django.tasks`` backend (where the Django task's own
``queue_name`` and ``priority`` are its declaration) -- unless the caller passes them,
even as the default values; a name nobody declares here keeps ``"default"``, 0 and 3.
Every check reads the written row back from the database."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync

import cairnq_django as cq
from cairnq_django.models import ProtocolMeta
from cairnq_django.protocol.limits import METADATA_KEY, METADATA_NAMESPACE
from cairnq_django.tasks import periodic, registry
from cairnq_django.testing import run_until_idle

PREFIX = "tests.declared."
MAIL = PREFIX + "mail.send"  # every option declared
REPORT = PREFIX + "report"  # only its queue declared
LIMITED = PREFIX + "limited"  # declared, with a limit key: submit_many builds its items one by one
PARENT = PREFIX + "parent"
APARENT = PREFIX + "aparent"
FOREIGN = PREFIX + "foreign"  # declared nowhere: UNKNOWN_TASKS is "allow" in the test project

DEFAULTS = ("default", 0, 3)
MAIL_DECLARED = ("emails", 7, 9)
REPORT_DECLARED = ("reports", 0, 3)
LIMITED_DECLARED = ("limited", 2, 4)
EXPLICIT = {"queue": "default", "priority": 0, "max_attempts": 3}  # the defaults, passed: they win


def _children(ctx: Any) -> list[str]:
    """Submit children by name as a handler does: declared, explicit, undeclared."""
    return [
        ctx.submit(MAIL).id,
        ctx.submit(MAIL, {}, **EXPLICIT).id,
        ctx.submit(MAIL, {}, priority=1).id,
        ctx.submit(FOREIGN).id,
    ]


async def _achildren(ctx: Any) -> list[str]:
    return [
        (await ctx.asubmit(MAIL)).id,
        (await ctx.asubmit(MAIL, {}, **EXPLICIT)).id,
        (await ctx.asubmit(MAIL, {}, priority=1)).id,
        (await ctx.asubmit(FOREIGN)).id,
    ]


@pytest.fixture(scope="module", autouse=True)
def declared() -> Iterator[dict[str, Any]]:
    definitions = {
        MAIL: registry.task(MAIL, queue="emails", priority=7, max_attempts=9)(lambda ctx: None),
        REPORT: registry.task(REPORT, queue="reports")(lambda ctx: None),
        LIMITED: registry.task(
            LIMITED, queue="limited", priority=2, max_attempts=4, global_concurrency=5, limit_key="customer"
        )(lambda ctx, payload: None),
        PARENT: registry.task(PARENT)(_children),
        APARENT: registry.task(APARENT)(_achildren),
    }
    yield definitions
    for name in definitions:
        registry.unregister(name)


def options(task: Any) -> tuple[str, int, int]:
    """The row's (queue, priority, max_attempts), as the database holds them."""
    row = cq.get(task if isinstance(task, str) else task.id)
    assert row is not None
    return (row.queue, row.priority, row.max_attempts)


# ---------------------------------------------------------------- submit
def test_submit_by_name_takes_the_declaration(cairnq_db: Any, declared: dict[str, Any]) -> None:
    assert options(cq.submit(MAIL)) == MAIL_DECLARED
    assert options(declared[MAIL].submit()) == MAIL_DECLARED  # the decorated object agrees
    assert options(cq.submit(REPORT, {})) == REPORT_DECLARED  # what it leaves out: the defaults
    assert options(cq.submit(FOREIGN)) == DEFAULTS


def test_an_explicit_option_wins_even_at_its_default_value(cairnq_db: Any, declared: dict[str, Any]) -> None:
    assert options(cq.submit(MAIL, {}, **EXPLICIT)) == DEFAULTS
    assert options(declared[MAIL].submit({}, **EXPLICIT)) == DEFAULTS
    assert options(cq.submit(MAIL, priority=1)) == ("emails", 1, 9)
    assert options(cq.submit(MAIL, queue="other", max_attempts=1)) == ("other", 7, 1)
    assert options(cq.submit(FOREIGN, queue="q", priority=-4, max_attempts=5)) == ("q", -4, 5)


def test_a_declared_name_does_not_loosen_validation(cairnq_db: Any) -> None:
    # None is a bad value, not "use the declaration": the protocol refuses it.
    for bad in ({"queue": None}, {"priority": None}, {"max_attempts": None}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            cq.submit(MAIL, {}, **bad)
    assert cq.list(limit=10) == []


def test_submit_help_names_the_rule() -> None:
    import inspect

    parameters = inspect.signature(cq.submit).parameters
    assert repr(parameters["queue"].default) == "<as declared, else 'default'>"
    assert repr(parameters["priority"].default) == "<as declared, else 0>"
    assert repr(parameters["max_attempts"].default) == "<as declared, else 3>"


# ---------------------------------------------------------------- submit_many
def test_submit_many_pairs_take_each_names_declaration(cairnq_db: Any) -> None:
    rows = cq.submit_many(
        [
            (MAIL, {"i": 0}),
            (FOREIGN, {"i": 1}),
            (LIMITED, {"customer": "c1"}),
            (MAIL, {"i": 3}),
            (REPORT, {"i": 4}),
            (FOREIGN, {"i": 5}),
            (LIMITED, {"customer": "c2"}),
            (MAIL, {"i": 7}),
        ]
    )
    assert [options(row) for row in rows] == [
        MAIL_DECLARED,
        DEFAULTS,
        LIMITED_DECLARED,
        MAIL_DECLARED,
        REPORT_DECLARED,
        DEFAULTS,
        LIMITED_DECLARED,
        MAIL_DECLARED,
    ]
    stored = [cq.get(row.id) for row in rows]
    assert [row.payload for row in stored] == [
        {"i": 0}, {"i": 1}, {"customer": "c1"}, {"i": 3}, {"i": 4}, {"i": 5}, {"customer": "c2"}, {"i": 7}
    ]
    # each limited item carries its own limit key; no other item carries one
    keys = [row.metadata.get(METADATA_NAMESPACE, {}).get(METADATA_KEY) for row in stored]
    assert keys == [None, None, "c1", None, None, None, "c2", None]


def test_submit_many_a_limited_first_pair_lends_nothing_to_the_next(cairnq_db: Any) -> None:
    rows = cq.submit_many([(LIMITED, {"customer": "c1"}), (FOREIGN, {}), (MAIL, {})])
    assert [options(row) for row in rows] == [LIMITED_DECLARED, DEFAULTS, MAIL_DECLARED]
    assert [cq.get(row.id).metadata for row in rows] == [
        {METADATA_NAMESPACE: {METADATA_KEY: "c1"}},
        {},
        {},
    ]


def test_submit_many_shared_and_item_options_win(cairnq_db: Any) -> None:
    pairs = cq.submit_many([(MAIL, {}), (FOREIGN, {}), (MAIL, {})], priority=5)
    assert [options(row) for row in pairs] == [("emails", 5, 9), ("default", 5, 3), ("emails", 5, 9)]
    at_defaults = cq.submit_many([(MAIL, {}), (REPORT, {})], **EXPLICIT)
    assert [options(row) for row in at_defaults] == [DEFAULTS, DEFAULTS]
    dicts = cq.submit_many(
        [
            {"name": MAIL},
            {"name": MAIL, "max_attempts": 2},
            {"name": MAIL, "queue": "default"},
            {"name": REPORT, "payload": {"x": 1}},
            {"name": FOREIGN},
        ],
        priority=1,
    )
    assert [options(row) for row in dicts] == [
        ("emails", 1, 9),
        ("emails", 1, 2),
        ("default", 1, 9),
        ("reports", 1, 3),
        ("default", 1, 3),
    ]
    overriding = cq.submit_many([{"name": MAIL, "priority": 8}, {"name": MAIL}], priority=1)
    assert [options(row) for row in overriding] == [("emails", 8, 9), ("emails", 1, 9)]


# ---------------------------------------------------------------- call
def called(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, int, int]:
    """Call with ``timeout=0`` (no worker runs here): the row the timeout names."""
    with pytest.raises(cq.TaskTimeout) as info:
        fn(*args, timeout=0, **kwargs)
    return options(info.value.task_id)


def test_call_by_name_takes_the_declaration(cairnq_db: Any, declared: dict[str, Any]) -> None:
    assert called(cq.call, MAIL) == MAIL_DECLARED
    assert called(declared[MAIL].call) == MAIL_DECLARED
    assert called(cq.call, MAIL, {}, **EXPLICIT) == DEFAULTS
    assert called(cq.call, MAIL, {}, max_attempts=1) == ("emails", 7, 1)
    assert called(cq.call, REPORT) == REPORT_DECLARED
    assert called(cq.call, FOREIGN) == DEFAULTS


# ---------------------------------------------------------------- async twins
def test_async_twins_take_the_declaration(cairnq_db: Any, declared: dict[str, Any]) -> None:
    async def scenario() -> dict[str, Any]:
        async def acalled(*args: Any, **kwargs: Any) -> str:
            try:
                await cq.acall(*args, timeout=0, **kwargs)
            except cq.TaskTimeout as exc:
                return str(exc.task_id)
            raise AssertionError("acall returned without a worker")

        return {
            "asubmit": [
                (await cq.asubmit(MAIL)).id,
                (await cq.asubmit(MAIL, {}, **EXPLICIT)).id,
                (await cq.asubmit(MAIL, {}, priority=1)).id,
                (await cq.asubmit(REPORT)).id,
                (await cq.asubmit(FOREIGN)).id,
                (await declared[MAIL].asubmit()).id,
            ],
            "asubmit_many": [
                row.id for row in await cq.asubmit_many([(MAIL, {}), (FOREIGN, {}), {"name": MAIL, "priority": 2}])
            ],
            "acall": [
                await acalled(MAIL),
                await acalled(MAIL, {}, **EXPLICIT),
                await acalled(FOREIGN),
            ],
        }

    ids = async_to_sync(scenario)()
    assert [options(task_id) for task_id in ids["asubmit"]] == [
        MAIL_DECLARED,
        DEFAULTS,
        ("emails", 1, 9),
        REPORT_DECLARED,
        DEFAULTS,
        MAIL_DECLARED,
    ]
    assert [options(task_id) for task_id in ids["asubmit_many"]] == [MAIL_DECLARED, DEFAULTS, ("emails", 2, 9)]
    assert [options(task_id) for task_id in ids["acall"]] == [MAIL_DECLARED, DEFAULTS, DEFAULTS]


# ---------------------------------------------------------------- ctx.submit
@pytest.mark.parametrize("parent", [PARENT, APARENT])
def test_children_submitted_by_name_take_the_declaration(cairnq_db: Any, parent: str) -> None:
    task = cq.submit(parent)
    run_until_idle(names=[parent])
    row = cq.get(task.id)
    assert row.status == "succeeded", row.error
    children = row.result
    assert [options(child) for child in children] == [MAIL_DECLARED, DEFAULTS, ("emails", 1, 9), DEFAULTS]
    assert {cq.get(child).parent_id for child in children} == {task.id}  # lineage still wired


# ---------------------------------------------------------------- periodic ticks
def _ms(*parts: int) -> int:
    return int(dt.datetime(*parts, tzinfo=dt.timezone.utc).timestamp() * 1000)


def _clear_markers() -> None:
    ProtocolMeta.objects.filter(key__startswith=periodic.MARKER_PREFIX).delete()


@pytest.fixture
def ticking(cairnq_db: Any, settings: Any) -> Iterator[Any]:
    _clear_markers()
    periodic.forget()
    yield settings
    periodic.forget()
    _clear_markers()


def tick_once(store: Any) -> dict[str, tuple[str, int, int]]:
    """Tick twice (the first sighting only records the tick); the second's rows by name."""
    periodic.tick(store, _ms(2026, 3, 1, 10, 1))
    return {row.name: options(row) for row in periodic.tick(store, _ms(2026, 3, 1, 10, 5))}


def test_periodic_ticks_take_the_declaration(ticking: Any, store: Any) -> None:
    ticking.CAIRNQ = {
        **ticking.CAIRNQ,
        "SCHEDULE": {
            MAIL: "*/5 * * * *",
            REPORT: {"cron": "*/5 * * * *", "queue": "default", "max_attempts": 6},
            FOREIGN: "*/5 * * * *",
        },
    }
    assert {s.name: (s.queue, s.priority, s.max_attempts) for s in periodic.schedules()} == {
        MAIL: MAIL_DECLARED,
        REPORT: ("default", 0, 6),
        FOREIGN: DEFAULTS,
    }
    assert tick_once(store) == {MAIL: MAIL_DECLARED, REPORT: ("default", 0, 6), FOREIGN: DEFAULTS}


def test_periodic_decorator_takes_the_declaration(ticking: Any, store: Any) -> None:
    name = PREFIX + "nightly"
    definition = cq.periodic("*/5 * * * *")(registry.task(name, queue="night", priority=3, max_attempts=2)(lambda ctx: None))
    try:
        ticking.CAIRNQ = {**ticking.CAIRNQ, "SCHEDULE": {}}
        assert tick_once(store) == {name: ("night", 3, 2)}
    finally:
        with periodic._lock:
            periodic._decorated.pop(name, None)
        registry.unregister(definition.name)


# ---------------------------------------------------------------- django.tasks backend
def test_django_tasks_keep_their_own_queue_and_priority(cairnq_db: Any) -> None:
    pytest.importorskip("cairnq_django.backends")
    from testproject.native import tasks

    echo = tasks.echo.module_path  # @task(queue_name="native", priority=7)
    payload = {"args": [], "kwargs": {}}
    # enqueue() writes the Django task's own values, Django's defaults included
    assert options(tasks.echo.enqueue().id) == ("native", 7, 3)
    assert options(tasks.echo.using(queue_name="default", priority=0).enqueue().id) == DEFAULTS
    assert options(tasks.echo.using(queue_name="other", priority=-5).enqueue().id) == ("other", -5, 3)
    assert options(tasks.add.enqueue(1, 2).id) == DEFAULTS
    # its name as a string: its declaration, like any declared name; explicit wins
    assert options(cq.submit(echo, payload)) == ("native", 7, 3)
    assert options(cq.submit(echo, payload, queue="default", priority=0)) == DEFAULTS
    assert options(cq.submit(tasks.fail_once_only.module_path, payload)) == ("default", 0, 1)
    assert [options(row) for row in cq.submit_many([(echo, payload), (tasks.add.module_path, payload)])] == [
        ("native", 7, 3),
        DEFAULTS,
    ]


def test_django_task_ticks_by_setting_take_its_declaration(ticking: Any, store: Any) -> None:
    pytest.importorskip("cairnq_django.backends")
    from testproject.native import tasks

    echo = tasks.echo.module_path
    ticking.CAIRNQ = {**ticking.CAIRNQ, "SCHEDULE": {echo: "*/5 * * * *"}}
    assert tick_once(store) == {echo: ("native", 7, 3)}
