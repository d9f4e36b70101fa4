"""Pin the ``@task`` contract: bad options fail at decoration naming the option,
the default name is ``<module>.<qualname>``, the decorated object stays callable
and gains ``submit``/``call``, an undeclared resource is reported (check
``cairnq.E010``), and the retry backoff and claim budgets compute what the
protocol says."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import checks
from django.test.utils import override_settings

from cairnq_django.tasks import registry
from cairnq_django.tasks.registry import TaskDefinitionError, task
from cairnq_django.protocol.backoff import retry_delay_ms
from cairnq_django.worker.budgets import Budgets, Source, build_sources


@pytest.fixture
def scratch_names() -> Any:
    """Unregister whatever a test registers, so the worker's registry stays the demo's."""
    before = set(registry.registered())
    yield
    for name in set(registry.registered()) - before:
        registry.unregister(name)


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"batch": 0}, "batch"),
        ({"batch": True}, "batch"),
        ({"concurrency": "x"}, "concurrency"),
        ({"concurrency": 0}, "concurrency"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"priority": "high"}, "priority"),
        ({"queue": ""}, "queue"),
        ({"resource": 3}, "resource"),
    ],
)
def test_bad_option_fails_at_decoration_naming_it(
    options: dict[str, Any], option: str, scratch_names: Any
) -> None:
    with pytest.raises(TaskDefinitionError, match=f"'{option}'"):

        @task("tests.bad", **options)
        def handler(ctx: Any, payload: Any) -> None:
            pass

    assert registry.get_task("tests.bad") is None


def test_default_name_is_module_and_qualname(scratch_names: Any) -> None:
    @task
    def plain(ctx: Any, payload: Any) -> int:
        return 7

    assert (
        plain.name
        == f"{__name__}.test_default_name_is_module_and_qualname.<locals>.plain"
    )
    assert registry.get_task(plain.name) is plain
    # Still the function: callable directly, with its metadata.
    assert plain(None, {}) == 7
    assert plain.__name__ == "plain"
    assert plain.batch is None and plain.takes_payload


def test_options_are_recorded_and_ctx_only_handlers_detected(
    scratch_names: Any,
) -> None:
    @task(
        "tests.options",
        queue="q1",
        batch=4,
        concurrency=2,
        resource="gpu",
        max_attempts=5,
        priority=3,
    )
    def batched(items: list[Any]) -> None:
        pass

    @task(name="tests.ctx_only")
    def ctx_only(ctx: Any) -> None:
        pass

    assert (batched.queue, batched.batch, batched.concurrency, batched.resource) == (
        "q1",
        4,
        2,
        "gpu",
    )
    assert (batched.max_attempts, batched.priority) == (5, 3)
    assert batched.own_source and not ctx_only.own_source
    assert not ctx_only.takes_payload


def test_one_name_cannot_be_taken_by_two_functions(scratch_names: Any) -> None:
    @task("tests.dup")
    def first(ctx: Any, payload: Any) -> None:
        pass

    with pytest.raises(TaskDefinitionError, match="already registered"):

        @task("tests.dup")
        def second(ctx: Any, payload: Any) -> None:
            pass


def test_undeclared_resource_is_check_w010(scratch_names: Any) -> None:
    @task("tests.tpu", resource="tpu")
    def uses_tpu(ctx: Any, payload: Any) -> None:
        pass

    def about_tpu() -> list[Any]:
        # testproject's demo.fleet.openai needs GLOBAL_RESOURCES, which these overrides leave out.
        return [m for m in checks.run_checks(tags=["cairnq"]) if m.id == "cairnq.W010" and "'tpu'" in m.msg]

    with override_settings(CAIRNQ={"RESOURCES": {"gpu": 1}}):
        errors = about_tpu()
    assert len(errors) == 1
    # A warning: --resource on the worker may declare it (the worker refuses otherwise).
    assert errors[0].level == checks.WARNING
    assert "'tpu'" in errors[0].msg and "declared resources: gpu" in errors[0].msg
    with override_settings(CAIRNQ={"RESOURCES": {"gpu": 1, "tpu": 2}}):
        assert not about_tpu()
    with override_settings(CAIRNQ={"RESOURCES": {"gpu": 1}, "GLOBAL_RESOURCES": {"tpu": 2}}):
        assert not about_tpu()


@pytest.mark.parametrize(
    ("attempt", "low", "high"),
    [
        (1, 500, 1000),
        (2, 1000, 2000),
        (3, 2000, 4000),
        (6, 15000, 30000),
        (40, 15000, 30000),
    ],
)
def test_backoff_equal_jitter_windows(attempt: int, low: int, high: int) -> None:
    assert retry_delay_ms(attempt, uniform=lambda: 0.0) == low
    assert retry_delay_ms(attempt, uniform=lambda: 0.999999) == high - 1
    assert low <= retry_delay_ms(attempt) < high


def test_backoff_disabled_and_not_retryable() -> None:
    assert retry_delay_ms(3, base_ms=0) == 0
    assert retry_delay_ms(3, retryable=False) == 0


def test_source_ceilings_compose() -> None:
    definitions = [
        registry.TaskDefinition(
            lambda c, p: None,
            name="a",
            queue=None,
            batch=None,
            concurrency=None,
            resource=None,
            max_attempts=None,
            priority=None,
        ),
        registry.TaskDefinition(
            lambda items: None,
            name="b",
            queue=None,
            batch=8,
            concurrency=None,
            resource="gpu",
            max_attempts=None,
            priority=None,
        ),
        registry.TaskDefinition(
            lambda c, p: None,
            name="c",
            queue=None,
            batch=None,
            concurrency=2,
            resource="gpu",
            max_attempts=None,
            priority=None,
        ),
    ]
    sources = build_sources(definitions)
    assert [s.names for s in sources] == [("b",), ("c",), ("a",)]
    budgets = Budgets(concurrency=10, resources={"gpu": 3}, claim_batch=16)
    b, c, shared = sources
    assert budgets.source_ceiling(b, {}) == 2  # claim_batch 16 rows / batch 8
    assert budgets.source_ceiling(c, {}) == 2  # its own concurrency binds under gpu=3
    assert budgets.source_ceiling(c, {"gpu": 2}) == 1  # units taken earlier this poll
    assert budgets.source_ceiling(shared, {}) == 16
    budgets.acquire(c, 0)
    budgets.acquire(c, 0)
    assert budgets.source_ceiling(c, {}) == 0
    assert budgets.source_ceiling(b, {}) == 1
    budgets.release(c, 0)
    assert budgets.source_ceiling(c, {}) == 1
    assert Source(names=("x",)).key is None


def test_claiming_ahead_refills_once_every_claimed_call_has_started() -> None:
    shared = Source(names=("a",))
    limited = Source(names=("b",), concurrency=3)
    budgets = Budgets(concurrency=2, ahead=3)
    assert budgets.free() == 5  # two slots and three ahead
    assert budgets.source_ceiling(shared, {}) is None
    # A source with a limit of its own only takes free slots, less what this poll drew.
    assert budgets.source_ceiling(limited, {}) == 2
    assert budgets.source_ceiling(limited, {}, drawn=1) == 1
    for _ in range(5):
        budgets.acquire(shared, 0)
    assert budgets.must_wait()
    budgets.release(shared, 0)
    budgets.release(shared, 0)
    # Three claimed, two running and one waiting: no claim of a single call yet.
    assert budgets.must_wait()
    budgets.release(shared, 0)
    # Every claimed call runs: the next claim brings the three ahead at once.
    assert not budgets.must_wait()
    assert budgets.free() == 3
    assert budgets.source_ceiling(limited, {}) == 0
    # Without claiming ahead, the worker claims as soon as one slot frees.
    plain = Budgets(concurrency=2)
    plain.acquire(shared, 0)
    plain.acquire(shared, 0)
    assert plain.must_wait()
    plain.release(shared, 0)
    assert not plain.must_wait() and plain.free() == 1
