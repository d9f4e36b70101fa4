"""Pin how a real worker settles what handlers do: results and ``complete``,
envelopes per protocol 3.16 (``handler_error``, ``TaskError``,
``unserializable_result``, ``SystemExit`` from a handler thread), retry with
equal-jitter backoff then success, ``max_run_ms`` abandoning an attempt (and
exit 3 past the abandoned-thread cap), the batch contract (mapping results,
early ``item.succeed``/``item.fail``, a raising batch failing each task with
its own backoff, one unstorable result not sinking its batch's statement), the
heartbeat keeping a long task and flagging only a lost one, async handlers,
and names without a handler never claimed."""

from __future__ import annotations

from typing import Any

import pytest

import cairnq_django as cq
from cairnq_django.models import Task

from .conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def rows(ids: list[str]) -> list[Task]:
    found = {task.id: task for task in Task.objects.filter(id__in=ids)}
    return [found[i] for i in ids]


def test_results_errors_and_burst_exit(cairnq_db: Any, start_worker: Any) -> None:
    noop = [
        cq.submit("demo.noop", {"result": {"n": i, "s": "ä"}}).id for i in range(3)
    ]
    crash = cq.submit("demo.crash", {"message": "kaput"}, max_attempts=1).id
    task_error = cq.submit("demo.task_error", {}, max_attempts=5).id
    bad = cq.submit("demo.bad_result", {}, max_attempts=5).id
    progress = cq.submit("demo.progress", {}).id
    worker = start_worker("--burst")
    assert worker.wait() == 0, worker.output()

    for i, task in enumerate(rows(noop)):
        assert (task.status, task.result, task.attempt, task.progress) == (
            "succeeded",
            {"n": i, "s": "ä"},
            1,
            1.0,
        )
        assert task.lease_until_ms is None and task.worker_id.startswith("worker_")
    (crashed,) = rows([crash])
    assert crashed.status == "failed"
    # details: the raised class and its traceback (docs/django-tasks.md)
    crash_details = crashed.error["details"]
    assert crash_details.pop("exception_class_path") == "builtins.RuntimeError"
    assert crash_details.pop("traceback").rstrip().endswith("RuntimeError: kaput")
    assert crashed.error == {
        "type": "RuntimeError",
        "code": "handler_error",
        "message": "kaput",
        "retryable": True,
        "details": {},
    }
    (rejected,) = rows([task_error])
    assert (rejected.status, rejected.attempt) == (
        "failed",
        1,
    )  # not retryable despite 5 attempts
    rejected_details = rejected.error["details"]
    assert rejected_details.pop("exception_class_path") == "cairnq_django.exceptions.TaskError"
    assert "input rejected" in rejected_details.pop("traceback")
    assert rejected.error == {
        "type": "InputError",
        "code": "bad_input",
        "message": "input rejected",
        "retryable": False,
        "details": {"field": "x"},
    }
    (unserializable,) = rows([bad])
    assert (unserializable.status, unserializable.attempt) == ("failed", 1)
    assert unserializable.error["code"] == "unserializable_result"
    assert unserializable.error["type"] == "SerializationError"
    assert unserializable.error["retryable"] is False
    assert unserializable.error["message"].startswith(
        "handler result is not JSON-serializable: "
    )
    (reported,) = rows([progress])
    assert (reported.status, reported.progress, reported.message) == (
        "succeeded",
        1.0,
        "started",
    )


def test_retry_backoff_then_success(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    task_id = cq.submit("demo.flaky", {"fail_times": 2}, max_attempts=3).id
    worker = start_worker()
    wait_until(
        lambda: Task.objects.get(id=task_id).status == "succeeded",
        30,
        what="flaky success",
    )
    task = Task.objects.get(id=task_id)
    assert task.attempt == 3 and task.result == {"attempt": 3}
    # The last failure's envelope stays as history of the retried attempts.
    assert task.error["code"] == "handler_error"
    starts = [e for e in ledger() if e["event"] == "start" and e["task_id"] == task_id]
    assert [e["attempt"] for e in starts] == [1, 2, 3]
    # Equal jitter: attempt 1 waits [0.5, 1) s, attempt 2 waits [1, 2) s.
    gap1 = starts[1]["wall"] - starts[0]["wall"]
    gap2 = starts[2]["wall"] - starts[1]["wall"]
    assert 0.45 <= gap1 < 1.6, gap1
    assert 0.95 <= gap2 < 2.6, gap2
    assert worker.alive()


def test_backoff_zero_disables_delay(cairnq_db: Any, start_worker: Any) -> None:
    task_id = cq.submit("demo.flaky", {"fail_times": 1}, max_attempts=2).id
    worker = start_worker("--burst", "--retry-backoff-ms", "0")
    assert worker.wait() == 0
    assert Task.objects.get(id=task_id).status == "succeeded"


def test_batch_raise_fails_each_with_its_own_backoff(
    cairnq_db: Any, start_worker: Any
) -> None:
    ids = [
        cq.submit("demo.batch_raise", {"i": i}, max_attempts=3).id for i in range(3)
    ]
    worker = start_worker("--burst")
    assert worker.wait() == 0
    delays = []
    for task in rows(ids):
        # Retryable failure with attempts left: back to queued, due later.
        assert (task.status, task.attempt, task.worker_id) == ("queued", 1, None)
        assert (
            task.error["code"] == "handler_error"
            and task.error["message"] == "batch exploded"
        )
        delays.append(task.run_at_ms - task.updated_at_ms)
    assert all(500 <= d < 1000 for d in delays), delays


def test_batch_delivery_mapping_and_early_settlement(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    plain = [cq.submit("demo.batch", {"n": i}).id for i in range(13)]
    failing = cq.submit("demo.batch", {"n": 100, "fail": True}, max_attempts=3).id
    early = cq.submit("demo.batch", {"n": 200, "early": True}).id
    worker = start_worker("--burst", "--concurrency", "2")
    assert worker.wait() == 0, worker.output()
    for i, task in enumerate(rows(plain)):
        assert (task.status, task.result) == ("succeeded", {"double": 2 * i})
    (failed,) = rows([failing])
    assert (failed.status, failed.attempt, failed.error["message"]) == (
        "failed",
        1,
        "rejected by the batch handler",
    )
    (finished_early,) = rows([early])
    assert (finished_early.status, finished_early.result) == (
        "succeeded",
        {"early": True},
    )
    batches = [e for e in ledger() if e["event"] == "batch"]
    assert sum(e["size"] for e in batches) == 15
    assert all(1 <= e["size"] <= 8 for e in batches)
    assert max(e["size"] for e in batches) == 8  # delivered in batches, not one by one


def test_max_run_ms_abandons_and_fails_retryably(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    stuck = cq.submit("demo.stubborn", {"seconds": 2.5}, max_attempts=1).id
    worker = start_worker("--max-run-ms", "400", "--concurrency", "1")
    wait_until(
        lambda: Task.objects.get(id=stuck).status == "failed",
        15,
        what="timeout failure",
    )
    task = Task.objects.get(id=stuck)
    assert (
        task.error["code"] == "handler_timeout"
        and task.error["type"] == "HandlerTimeout"
    )
    assert task.error["retryable"] is True
    # The slot was freed at the deadline: a new task runs while the zombie still sleeps.
    follow = cq.submit("demo.noop", {"result": 1}).id
    wait_until(
        lambda: Task.objects.get(id=follow).status == "succeeded",
        10,
        what="task after timeout",
    )
    late = wait_until(
        lambda: [e for e in ledger() if e["event"] == "late_write"],
        10,
        what="zombie's late write",
    )
    assert late[0]["refused"] is True and late[0]["error"] == "LostLease"
    assert (
        Task.objects.get(id=stuck).progress is None
    )  # the refused write changed nothing
    assert worker.alive()


def test_async_handler_and_async_timeout(cairnq_db: Any, start_worker: Any) -> None:
    echo = cq.submit("demo.async_echo", {"ms": 10}).id
    hung = cq.submit("demo.async_hang", {"seconds": 30}, max_attempts=1).id
    worker = start_worker("--max-run-ms", "1500", "--concurrency", "2")
    wait_until(
        lambda: Task.objects.get(id=hung).status == "failed", 20, what="async timeout"
    )
    task = Task.objects.get(id=echo)
    assert (task.status, task.result, task.message) == (
        "succeeded",
        {"echo": {"ms": 10}},
        "halfway",
    )
    assert Task.objects.get(id=hung).error["code"] == "handler_timeout"
    assert worker.alive()


def test_names_without_a_handler_are_never_claimed(
    cairnq_db: Any, start_worker: Any
) -> None:
    unknown = cq.submit("nobody.handles.this", {}).id
    known = cq.submit("demo.noop", {}).id
    worker = start_worker("--burst")
    assert worker.wait() == 0
    stranger, done = rows([unknown, known])
    assert (stranger.status, stranger.attempt, stranger.worker_id) == (
        "queued",
        0,
        None,
    )
    assert done.status == "succeeded"


def test_task_flag_limits_handlers(cairnq_db: Any, start_worker: Any) -> None:
    noop = cq.submit("demo.noop", {}).id
    other = cq.submit("demo.progress", {}).id
    worker = start_worker("--burst", "--task", "demo.noop")
    assert worker.wait() == 0
    assert [t.status for t in rows([noop, other])] == ["succeeded", "queued"]


def test_too_many_abandoned_threads_exit_3(cairnq_db: Any, start_worker: Any) -> None:
    ids = [
        cq.submit("demo.stubborn", {"seconds": 20}, max_attempts=1).id
        for _ in range(9)
    ]
    worker = start_worker(
        "--max-run-ms", "200", "--concurrency", "1", "--drain-timeout", "0"
    )
    assert worker.wait(40) == 3
    assert "worker must restart" in worker.output()
    assert Task.objects.filter(id__in=ids, status="failed").count() == 9


def test_one_unstorable_result_does_not_sink_the_batch(
    cairnq_db: Any, dialect: str, start_worker: Any
) -> None:
    good = [cq.submit("demo.echo_batch", {"value": {"i": i}}).id for i in range(3)]
    # The handler returns a string with NUL: valid JSON that PostgreSQL's jsonb
    # refuses (SQLite stores it), in the same complete_many as the good ones.
    bad = cq.submit("demo.echo_batch", {"nul": True}, max_attempts=3).id
    worker = start_worker("--burst")
    assert worker.wait() == 0, worker.output()[-2000:]
    for i, task in enumerate(rows(good)):
        assert (task.status, task.result) == ("succeeded", {"i": i})
    (odd,) = rows([bad])
    if dialect == "postgres":
        assert (odd.status, odd.attempt) == ("failed", 1)
        assert odd.error["code"] == "unserializable_result"
    else:
        assert odd.status == "succeeded"


def test_a_batch_result_may_be_any_mapping(cairnq_db: Any, start_worker: Any) -> None:
    # docs/worker.md: "a mapping fills results by task id" -- any Mapping, not
    # only a dict; a task the mapping leaves out succeeds with no result.
    # tests/native/test_testing.py pins the same for run_until_idle.
    filled = [cq.submit("demo.mapping_batch", {"n": i}).id for i in range(3)]
    left_out = cq.submit("demo.mapping_batch", {}).id
    worker = start_worker("--burst")
    assert worker.wait() == 0, worker.output()[-2000:]
    for i, task in enumerate(rows(filled)):
        assert (task.status, task.result) == ("succeeded", {"n": i})
    (odd,) = rows([left_out])
    assert (odd.status, odd.result) == ("succeeded", None)


def test_heartbeat_keeps_a_long_task_beyond_its_lease(
    cairnq_db: Any, start_worker: Any
) -> None:
    task_id = cq.submit("demo.sleep", {"ms": 2500}).id
    worker = start_worker("--burst", "--lease-ms", "900")
    assert worker.wait(30) == 0
    task = Task.objects.get(id=task_id)
    assert (task.status, task.attempt) == ("succeeded", 1)


def test_lease_lost_on_the_beat_flags_only_the_context(
    cairnq_db: Any, start_worker: Any, ledger: Any
) -> None:
    task_id = cq.submit("demo.hang", {"seconds": 60}).id
    worker = start_worker(overrides={"LEASE_MS": 1500})
    wait_until(lambda: [e for e in ledger() if e["event"] == "start"], 20, what="start")
    assert Task.objects.filter(id=task_id).update(worker_id="worker_thief") == 1
    (end,) = wait_until(
        lambda: [e for e in ledger() if e["event"] == "end"], 10, what="handler noticed"
    )
    assert end["lost"] is True
    # Nothing was written for the lost attempt: the thief's row is untouched.
    task = Task.objects.get(id=task_id)
    assert (task.status, task.worker_id, task.result) == (
        "running",
        "worker_thief",
        None,
    )
    wait_until(
        lambda: "lease lost: task=" + task_id in worker.output(),
        5,
        what="lease-lost log line",
    )
    # The worker keeps working.
    follow = cq.submit("demo.noop", {"result": 1}).id
    wait_until(
        lambda: Task.objects.get(id=follow).status == "succeeded", 10, what="next task"
    )


def test_system_exit_in_a_handler_is_that_tasks_failure(
    cairnq_db: Any, start_worker: Any
) -> None:
    exiting = cq.submit("demo.system_exit", {}, max_attempts=1).id
    interrupted = cq.submit("demo.system_exit", {"interrupt": True}, max_attempts=1).id
    after = cq.submit("demo.noop", {"result": "still here"}).id
    worker = start_worker("--burst")
    assert worker.wait() == 0
    first, second, third = rows([exiting, interrupted, after])
    assert (first.status, first.error["type"], first.error["code"]) == (
        "failed",
        "SystemExit",
        "handler_error",
    )
    assert (second.status, second.error["type"]) == ("failed", "KeyboardInterrupt")
    assert (third.status, third.result) == ("succeeded", "still here")
