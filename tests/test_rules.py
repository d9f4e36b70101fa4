"""Pin the rules defined once in ``cairnq_django.protocol``: the backoff
sequences of every caller (same delays as each had written out by hand), the
submit/list/purge argument rules the API and the store share, the error
envelopes the store writes, and the public names of ``cairnq_django``."""

from __future__ import annotations

import itertools
import types

import pytest

import cairnq_django
from cairnq_django.client import backpressure
from cairnq_django.protocol import backoff, envelopes, validation
from cairnq_django.protocol.backoff import Backoff, capped_doubling, equal_jitter, equal_jitter_ms, retry_delay_ms


def _windows(first, cap, n):  # type: ignore[no-untyped-def]
    return [capped_doubling(step, first, cap) for step in range(1, n + 1)]


def _doubled_by_hand(first, cap, n):  # type: ignore[no-untyped-def]
    # What the callers wrote before: start at ``first``, double after each wait, cap.
    out, value = [], first
    for _ in range(n):
        out.append(value)
        value = min(value * 2, cap)
    return out


# ---------------------------------------------------------------- backoff
def test_capped_doubling_is_the_hand_written_doubling() -> None:
    for first, cap in ((0.001, 0.05), (0.25, 5.0), (0.5, 5.0), (1.0, 30.0), (250, 5_000), (1_000, 30_000)):
        assert _windows(first, cap, 40) == _doubled_by_hand(first, cap, 40)


def test_capped_doubling_never_overflows() -> None:
    assert capped_doubling(10_000, 0.25, 5.0) == 5.0
    assert capped_doubling(10_000, 1_000, 30_000) == 30_000
    assert capped_doubling(0, 7, 100) == 7  # a step before the first counts as the first


def test_retry_delay_sequence() -> None:
    low = [retry_delay_ms(a, uniform=lambda: 0.0) for a in range(1, 9)]
    high = [retry_delay_ms(a, uniform=lambda: 0.999999) for a in range(1, 9)]
    assert low == [500, 1_000, 2_000, 4_000, 8_000, 15_000, 15_000, 15_000]
    assert high == [999, 1_999, 3_999, 7_999, 15_999, 29_999, 29_999, 29_999]
    assert retry_delay_ms(5_000, uniform=lambda: 0.0) == 15_000
    assert retry_delay_ms(1, base_ms=3, max_ms=10, uniform=lambda: 0.5) == 2  # 1 + int(0.5 * 2)
    assert retry_delay_ms(2, base_ms=0) == 0 and retry_delay_ms(2, retryable=False) == 0


def test_equal_jitter_bounds() -> None:
    assert equal_jitter(4.0, lambda: 0.0) == 2.0
    assert equal_jitter(4.0, lambda: 0.5) == 3.0
    assert equal_jitter_ms(7, lambda: 0.0) == 3
    assert equal_jitter_ms(7, lambda: 0.999) == 6


def test_database_retry_backoff_sequence() -> None:
    from cairnq_django.worker.settler import RETRY_CAP_S, RETRY_FIRST_S

    retries = Backoff(RETRY_FIRST_S, RETRY_CAP_S)
    retries.uniform = lambda: 1.0  # the top of each window
    assert [retries.next_delay() for _ in range(8)] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert retries.failures == 8 and retries.since is not None
    assert retries.reset() is True and retries.failures == 0 and retries.since is None
    assert retries.reset() is False
    retries.uniform = lambda: 0.0  # the bottom: half of each window
    assert [retries.next_delay() for _ in range(3)] == [0.125, 0.25, 0.5]
    # The claim loop's own constants go through the same rule.
    custom = Backoff(0.05, 2.0)
    custom.uniform = lambda: 1.0
    assert [custom.next_delay() for _ in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0]


def test_database_retry_survives_a_long_outage() -> None:
    retries = Backoff(0.25, 5.0)
    for _ in range(5_000):
        delay = retries.next_delay()
    assert 2.5 <= delay <= 5.0


def test_sqlite_busy_retry_windows() -> None:
    from cairnq_django.store.sqlite import store as sqlite_store

    first, cap = sqlite_store._FIRST_BACKOFF_S, sqlite_store._MAX_BACKOFF_S
    assert _windows(first, cap, 8) == [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.05, 0.05]


def test_listen_retry_sequence() -> None:
    from cairnq_django.worker import wakeups

    retries = Backoff(wakeups._RELISTEN_FIRST_S, wakeups._RELISTEN_MAX_S, jitter=False)
    assert [retries.next_delay() for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_worker_start_retry_sequence() -> None:
    from cairnq_django.management.commands import cairnq_worker

    retries = Backoff(cairnq_worker._START_RETRY_FIRST_S, cairnq_worker._START_RETRY_MAX_S, jitter=False)
    assert [retries.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_submit_gate_sleep_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backpressure.time, "monotonic", lambda: 100.0)
    sleeps = [backpressure.Gate._sleep_or_raise("q", 100.0, 60_000, waits) for waits in range(1, 8)]
    assert sleeps == [250, 500, 1_000, 2_000, 4_000, 5_000, 5_000]
    # Cut at the deadline.
    assert backpressure.Gate._sleep_or_raise("q", 100.0, 300, 3) == 300


def test_backoff_module_is_pure() -> None:
    modules = [value.__name__ for value in vars(backoff).values() if isinstance(value, types.ModuleType)]
    assert modules and not [name for name in modules if name.startswith(("django", "cairnq_django"))]


# ---------------------------------------------------------------- validation
def test_conflict_strategies_defined_once() -> None:
    from cairnq_django.store import base

    assert base.CONFLICT_STRATEGIES is validation.CONFLICT_STRATEGIES
    assert validation.CONFLICT_STRATEGIES == ("reuse", "reuse-succeeded", "reject", "replace")
    for strategy in validation.CONFLICT_STRATEGIES:
        validation.check_conflict(strategy)
        assert validation.conflict_problem(strategy) is None
    with pytest.raises(ValueError, match="conflict must be one of reuse, reuse-succeeded, reject, replace; got 'x'"):
        validation.check_conflict("x")


def test_status_tuples_match_the_model() -> None:
    from cairnq_django.models import TERMINAL_STATUSES, TaskStatus

    assert validation.STATUSES == tuple(TaskStatus.values)
    assert validation.TERMINAL_STATUSES == TERMINAL_STATUSES


@pytest.mark.parametrize(
    "args, label",
    [
        (("nope", 1, 0), "status"),
        ((None, -1, 0), "limit"),
        ((None, True, 0), "limit"),
        ((None, 1, -1), "offset"),
        ((None, 1, 2**63), "offset"),
    ],
)
def test_list_args(args: tuple, label: str) -> None:
    with pytest.raises(ValueError, match=f"^{label} "):
        validation.check_list_args(*args)


@pytest.mark.parametrize(
    "args, label",
    [
        ((-1, 1, None), "older_than_ms"),
        ((0, 0, None), "limit"),
        ((0, 1, "queued"), "status"),
        ((0, 1, "nope"), "status"),
    ],
)
def test_purge_args(args: tuple, label: str) -> None:
    with pytest.raises(ValueError, match=f"^{label} "):
        validation.check_purge_args(*args)


def test_valid_arguments_pass() -> None:
    validation.check_list_args(None, 0, 0)
    validation.check_list_args("running", 2**63 - 1, 2**63 - 1)
    for status in (None, *validation.TERMINAL_STATUSES):
        validation.check_purge_args(0, 1, status)
    validation.check_max_depth(0)
    validation.check_optional_texts(queue=None, name="x")
    with pytest.raises(ValueError, match="^max_depth "):
        validation.check_max_depth(-1)
    with pytest.raises(ValueError, match="^name "):
        validation.check_optional_texts(queue=None, name="")


def test_submit_args_in_protocol_order() -> None:
    good = dict(
        name="n", queue="q", key=None, conflict="reuse", priority=0, max_attempts=1, delay_ms=0,
        correlation_id=None, parent_id=None, root_id=None,
    )
    validation.check_submit_args(**good)
    # conflict, max_attempts, delay_ms are checked before the other arguments.
    order = ["conflict", "max_attempts", "delay_ms", "name", "queue", "priority", "key",
             "correlation_id", "parent_id", "root_id"]
    bad = {"conflict": "x", "max_attempts": 0, "delay_ms": -1, "name": "", "queue": "", "priority": 2**31,
           "key": "", "correlation_id": "", "parent_id": "", "root_id": ""}
    for index, label in enumerate(order):
        args = {**good, **{name: bad[name] for name in order[index:]}}
        with pytest.raises(ValueError, match=f"^{label} "):
            validation.check_submit_args(**args)


def test_text_limit_is_one_constant() -> None:
    from cairnq_django.protocol import bounds

    assert bounds.MAX_TEXT_BYTES == 1024
    assert bounds.text_problem("x" * 1024) is None
    assert "at most 1024 bytes" in (bounds.text_problem("x" * 1025) or "")
    assert bounds.text_problem("é" * 512) is None and bounds.text_problem("é" * 513) is not None


# ---------------------------------------------------------------- envelopes
def test_lease_expired_envelope() -> None:
    assert envelopes.LEASE_EXPIRED_ERROR == {
        "type": "LeaseExpired",
        "code": "lease_expired",
        "message": "task lease expired and max attempts reached",
        "retryable": False,
        "details": {},
    }


def test_encode_error_falls_back_to_the_reduced_envelope() -> None:
    import json

    ok = envelopes.envelope(type="T", code="c", message="m", retryable=True, details={"a": 1})
    assert json.loads(envelopes.encode_error(ok, True)) == ok
    nul = envelopes.envelope(type="T", code="c", message="a\x00b", retryable=True)
    assert "\\u0000" not in envelopes.encode_error(nul, True)
    unencodable = envelopes.envelope(type="T", code="c", message="m", retryable=False, details={"x": object()})
    assert json.loads(envelopes.encode_error(unencodable, False)) == {
        "type": "T", "code": "c", "message": "m", "retryable": False, "details": {},
    }


def test_envelope_readers() -> None:
    recorded = {"type": "ValueError", "message": "m", "details": {"exception_class_path": "a.B", "traceback": "tb"}}
    assert envelopes.recorded_class_path(recorded) == "a.B"
    assert envelopes.traceback_or_summary(recorded) == "tb"
    foreign = {"type": "Error", "message": "boom", "details": ["not", "a", "mapping"]}
    assert envelopes.details_of(foreign) == {}
    assert envelopes.recorded_class_path(foreign) is None
    assert envelopes.traceback_or_summary(foreign) == "Error: boom"
    assert envelopes.unreadable_error_envelope("why")["code"] == "bad_payload"


def test_written_and_read_keys_agree() -> None:
    try:
        raise KeyError("k")
    except KeyError as exc:
        details = envelopes.exception_details(exc)
    stored = envelopes.envelope(type="KeyError", code="handler_error", message="k", retryable=True, details=details)
    assert envelopes.recorded_class_path(stored) == "builtins.KeyError"
    assert "KeyError" in envelopes.traceback_or_summary(stored)


# ---------------------------------------------------------------- the public API
PUBLIC_NAMES = sorted(
    """
    AlreadyExists CairnQError DatabaseFull LostLease PayloadTooLarge QueueFull SchemaNotInstalled
    SerializationError Snooze Task TaskCanceled TaskContext TaskError TaskFailed TaskRef TaskStatus TaskTimeout
    UnknownTask UnknownTaskWarning acall acancel acancel_by_key aget aget_by_key aget_status
    aget_status_by_key alist apurge aqueue_depth aretry aretry_by_key astats asubmit asubmit_many
    await_task await_task_by_key call cancel cancel_by_key get get_by_key get_status get_status_by_key
    list purge queue_depth retry retry_by_key stats submit submit_many task wait wait_by_key
    QueuePause pause_queue resume_queue paused_queues apause_queue aresume_queue apaused_queues
    WorkerInfo workers aworkers
    Workflow chain group chord signature Signature WorkflowRunHandle get_workflow cancel_workflow retry_workflow
    WorkflowError WorkflowNotFound Batch
    """.split()
)


def test_public_names_are_pinned() -> None:
    assert sorted(cairnq_django.__all__) == PUBLIC_NAMES
    assert len(set(cairnq_django.__all__)) == len(cairnq_django.__all__)
    for name in cairnq_django.__all__:
        assert getattr(cairnq_django, name) is not None


def test_async_twins_exist_for_every_sync_function() -> None:
    sync = {"submit", "submit_many", "get", "get_by_key", "get_status", "get_status_by_key", "list", "stats",
            "queue_depth", "cancel", "cancel_by_key", "retry", "retry_by_key", "purge", "call",
            "pause_queue", "resume_queue", "paused_queues", "workers"}
    for name in sync:
        assert "a" + name in cairnq_django.__all__, name
    assert {"await_task", "await_task_by_key"} <= set(cairnq_django.__all__)
    assert not list(itertools.filterfalse(callable, (getattr(cairnq_django, n) for n in sync)))
