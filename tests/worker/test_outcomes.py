"""Pin ``worker/outcomes.settlements``, the pipeline the worker and ``run_until_idle`` share:
a returned value becomes the result (a batch's ``Mapping``, of any kind, fills results by
task id), an unserializable result fails permanently, ``LostLease`` writes nothing, any
other exception fails every unsettled task with its envelope and the backoff, a ``Snooze``
(raised, or one task's value in a batch's mapping) snoozes with its delay, and tasks
the handler settled (or whose lease is lost) are left alone. No database: plain rows."""

from __future__ import annotations

from collections import OrderedDict
from types import MappingProxyType, SimpleNamespace
from typing import Any

import pytest

from cairnq_django.exceptions import LostLease, Snooze, TaskError
from cairnq_django.worker.attempt import Attempt, AttemptOwner
from cairnq_django.worker.outcomes import NO_BACKOFF, RetryBackoff, settlements

OWNER = AttemptOwner(None, "w1", 30_000)  # type: ignore[arg-type]


def _attempts(n: int) -> list[Attempt]:
    rows = [SimpleNamespace(id=f"t{i}", name="n", attempt=1, cancel_requested_at_ms=None) for i in range(n)]
    return [Attempt(row, OWNER) for row in rows]  # type: ignore[arg-type]


def _run(attempts: list[Attempt], value: Any = None, raised: BaseException | None = None, **kw: Any) -> list[Any]:
    kw.setdefault("batch", True)
    return settlements(None, attempts, value, raised, backoff=kw.pop("backoff", NO_BACKOFF), log=False, **kw)


@pytest.mark.parametrize("results", [dict, OrderedDict, MappingProxyType], ids=lambda kind: kind.__name__)
def test_any_mapping_fills_batch_results_by_task_id(results: Any) -> None:
    attempts = _attempts(3)
    items = _run(attempts, results({"t0": {"a": 1}, "t2": [2]}))
    assert [(item.attempt.task.id, item.result_json, item.failure) for item in items] == [
        ("t0", '{"a":1}', None),
        ("t1", None, None),
        ("t2", "[2]", None),
    ]
    assert all(attempt.settling for attempt in attempts)  # reserved for the caller's write


def test_a_batch_value_that_is_not_a_mapping_leaves_no_results() -> None:
    assert [item.result_json for item in _run(_attempts(2), ["t0"])] == [None, None]


def test_a_single_task_value_is_its_result_and_an_unserializable_one_fails_for_good() -> None:
    (item,) = _run(_attempts(1), {"k": "v"}, batch=False)
    assert (item.result_json, item.failure) == ('{"k":"v"}', None)
    (item,) = _run(_attempts(1), {1, 2}, batch=False)
    assert item.failure is not None and item.failure.error["code"] == "unserializable_result"
    assert (item.failure.retryable, item.failure.delay_ms) == (False, 0)


def test_settled_and_lost_attempts_are_left_alone() -> None:
    settled, lost, open_ = _attempts(3)
    settled.begin_settle()
    settled.end_settle("succeeded")
    lost.mark_lost()
    assert [item.attempt for item in _run([settled, lost, open_], {})] == [open_]


def test_lost_lease_writes_nothing_and_frees_the_reservation() -> None:
    attempts = _attempts(2)
    assert _run(attempts, raised=LostLease("t0")) == []
    assert not any(attempt.settling or attempt.settled for attempt in attempts)


def test_an_exception_fails_every_task_with_its_envelope_and_backoff() -> None:
    items = _run(_attempts(2), raised=RuntimeError("boom"), backoff=RetryBackoff(1_000, 30_000))
    assert [(item.failure.error["type"], item.failure.retryable) for item in items] == [("RuntimeError", True)] * 2
    assert all(500 <= item.failure.delay_ms <= 1_000 for item in items)
    (item,) = _run(_attempts(1), raised=TaskError("no", code="bad_input", retryable=False), backoff=RetryBackoff(1_000, 30_000))
    assert (item.failure.error["code"], item.failure.retryable, item.failure.delay_ms) == ("bad_input", False, 0)


def test_a_raised_snooze_snoozes_every_unsettled_task_of_the_call() -> None:
    settled, lost, *open_ = _attempts(4)
    settled.begin_settle()
    settled.end_settle("succeeded")
    lost.mark_lost()
    items = _run([settled, lost, *open_], raised=Snooze(delay_ms=30_000), backoff=RetryBackoff(1_000, 30_000))
    assert [(item.attempt, item.snooze_ms, item.failure, item.result_json) for item in items] == [
        (attempt, 30_000, None, None) for attempt in open_
    ]
    (item,) = _run(_attempts(1), raised=Snooze(0), batch=False)
    assert (item.snoozed, item.snooze_ms) == (True, 0)


def test_a_snooze_as_one_batch_value_snoozes_that_task_alone() -> None:
    items = _run(_attempts(3), {"t0": {"a": 1}, "t1": Snooze(delay_ms=5_000)})
    assert [(item.attempt.task.id, item.snooze_ms, item.result_json) for item in items] == [
        ("t0", None, '{"a":1}'),
        ("t1", 5_000, None),
        ("t2", None, None),
    ]
    assert not any(item.failure for item in items)
