"""Pin what real workers do for the triage: count failed attempts by error, and advance bulk operations.

A worker subprocess counts each failed attempt it wrote into
``cairnq_django_error_minute`` (failed vs retried); its housekeeping takes an
open ``BulkOperation`` and works through every matching task in chunks,
writing an admin ``LogEntry`` per changed task; a row the database refuses
is counted and passed.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connection

import cairnq_django as cq
from cairnq_django.models import MINUTE_MS, BulkOperation, ErrorMinute, QueueMinute, Task
from cairnq_django.worker.history import QueueHistory, short_message

from .conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

UNSERVED = "triage.unserved"  # no handler: re-queued tasks stay queued


def test_short_messages_are_prefixes() -> None:
    assert short_message("first line\nsecond") == "first line"
    long = "x" * 500
    assert short_message(long) == "x" * 200 and long.startswith(short_message(long))


def test_a_worker_counts_failed_attempts_by_error(cairnq_db: Any, start_worker: Any) -> None:
    for _ in range(2):
        cq.submit("demo.crash", {"message": "disk full\ndetails here"}, queue="tri", max_attempts=2)
    cq.submit("demo.task_error", {}, queue="tri")
    cq.submit("demo.noop", {}, queue="tri")
    worker = start_worker("--queue", "tri", "--burst", overrides={"RETRY_BACKOFF_MS": 1})
    assert worker.wait() == 0, worker.output()[-3000:]
    rows = {
        (row.name, row.error_type, row.message): (row.failed, row.retried)
        for row in ErrorMinute.objects.filter(queue="tri")
    }
    # Each crash: one attempt retried, the last one failing the task.
    crash = [key for key in rows if key[0] == "demo.crash"]
    assert len(crash) == 1 and crash[0][2] == "disk full", rows
    assert rows[crash[0]] == (2, 2)
    assert rows[("demo.task_error", "InputError", "input rejected")] == (1, 0)
    assert len(rows) == 2
    for row in ErrorMinute.objects.all():
        assert row.minute_ms % MINUTE_MS == 0


def test_a_worker_counts_the_leases_it_recovers_from_a_dead_worker(cairnq_db: Any, start_worker: Any) -> None:
    # A killed worker settles nothing, so its tasks' fate reaches the dashboard
    # only from whoever recovers them: one out of attempts (failed), one put back.
    last = cq.submit("demo.sleep", {"ms": 60_000}, queue="lost", max_attempts=1).id
    again = cq.submit("demo.sleep", {"ms": 60_000}, queue="lost", max_attempts=3).id
    victim = start_worker("--queue", "lost", "--concurrency", "2", overrides={"LEASE_MS": 1_000})
    wait_until(lambda: Task.objects.filter(id__in=[last, again], status="running").count() == 2, 30, what="both ran")
    victim.kill_group()
    now_ms = lambda: int(time.time() * 1000)  # noqa: E731
    wait_until(
        lambda: not Task.objects.filter(queue="lost", status="running", lease_until_ms__gt=now_ms()).exists(),
        30, what="the dead worker's leases expired",
    )
    # The rescuer serves another queue: recovering any dead worker's task is every worker's job.
    rescuer = start_worker("--queue", "elsewhere", "--burst", overrides={"LEASE_MS": 1_000})
    assert rescuer.wait() == 0, rescuer.output()[-3000:]
    assert Task.objects.get(id=last).status == "failed" and Task.objects.get(id=again).status == "queued"
    rows = {
        (row.name, row.error_type, row.message): (row.failed, row.retried)
        for row in ErrorMinute.objects.filter(queue="lost")
    }
    assert rows == {
        ("demo.sleep", "LeaseExpired", "task lease expired and max attempts reached"): (1, 0),
        ("demo.sleep", "LeaseExpired", "task lease expired; queued for another attempt"): (0, 1),
    }
    minutes = QueueMinute.objects.filter(queue="lost")
    assert sum(m.failed for m in minutes) == 1 and sum(m.retried for m in minutes) == 1


def test_error_counts_survive_a_refused_flush(cairnq_db: Any, store: Any) -> None:
    history = QueueHistory(store)
    history.errored("q", "n", {"type": "E", "message": "m"}, terminal=True)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE cairnq_django_error_minute RENAME TO cairnq_django_error_minute_away")
    try:
        assert not history.flush()
        assert history.pending_errors == 1
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE cairnq_django_error_minute_away RENAME TO cairnq_django_error_minute")
    history.errored("q", "n", {"type": "E", "message": "m"}, terminal=False)
    history.errored("q", "n", "not an envelope", terminal=False)  # no type, no message: not counted
    assert history.flush()
    row = ErrorMinute.objects.get()
    assert (row.failed, row.retried) == (1, 1)


def make_failed(n: int, queue: str, error_type: str = "Boom") -> list[str]:
    """``n`` failed tasks in one statement each way (submit_many, then one UPDATE)."""
    rows = cq.submit_many([(UNSERVED, {"i": i}) for i in range(n)], queue=queue)
    ids = [row.id for row in rows]
    error = '{"type": "%s", "message": "it broke"}' % error_type
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE cairnq_tasks SET status = 'failed', attempt = 1, error = %s, completed_at_ms = updated_at_ms"
            " WHERE queue = %s",
            [error, queue],
        )
    return ids


def operation(user: User, action: str, spec: dict[str, str], matched: int) -> BulkOperation:
    now = int(time.time() * 1000)
    return BulkOperation.objects.create(
        action=action, filter=spec, requested_by_pk=str(user.pk), requested_by=user.username,
        matched=matched, created_at_ms=now, updated_at_ms=now,
    )


def test_a_worker_retries_thousands_in_chunks_with_the_admin_log(cairnq_db: Any, start_worker: Any) -> None:
    ids = make_failed(3000, "bulk")
    make_failed(5, "elsewhere")
    user = User.objects.create_superuser("operator", password="pw")
    op = operation(user, "retry", {"queue": "bulk", "status": "failed", "error_type": "Boom"}, 3000)
    seen: set[int] = set()
    start_worker("--queue", "bulk")

    def done() -> bool:
        op.refresh_from_db()
        seen.add(op.processed)
        return op.state == "done"

    wait_until(done, 60, what="bulk retry done")
    assert (op.processed, op.changed, op.errors) == (3000, 3000, 0)
    assert op.cursor == max(ids) and op.finished_at_ms is not None and op.worker_id
    assert Task.objects.filter(queue="bulk", status="queued").count() == 3000
    assert Task.objects.filter(queue="elsewhere", status="failed").count() == 5
    entries = LogEntry.objects.filter(user=user)
    assert entries.count() == 3000
    assert set(entries.values_list("object_id", flat=True)) == set(ids)
    assert set(entries.values_list("change_message", flat=True)) == {"Re-queued (bulk)."}
    # Progress is written chunk by chunk (what the page shows while it runs).
    assert all(value % 1000 == 0 for value in seen), seen


def _refuse_updates_of(task_id: str, dialect: str) -> None:
    with connection.cursor() as cursor:
        if dialect == "postgres":
            cursor.execute(
                "CREATE FUNCTION triage_refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
                f" BEGIN IF OLD.id = '{task_id}' THEN RAISE EXCEPTION 'refused for the test'; END IF; RETURN NEW; END $$"
            )
            cursor.execute(
                "CREATE TRIGGER triage_refuse BEFORE UPDATE ON cairnq_tasks FOR EACH ROW EXECUTE FUNCTION triage_refuse()"
            )
        else:
            cursor.execute(
                f"CREATE TRIGGER triage_refuse BEFORE UPDATE ON cairnq_tasks WHEN OLD.id = '{task_id}'"
                " BEGIN SELECT RAISE(ABORT, 'refused for the test'); END"
            )


def _drop_refusal(dialect: str, trigger: str, table: str) -> None:
    """Drop a refusing trigger (and, on PostgreSQL, its function of the same name)."""
    with connection.cursor() as cursor:
        if dialect == "postgres":
            cursor.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
            cursor.execute(f"DROP FUNCTION IF EXISTS {trigger}()")
        else:
            cursor.execute(f"DROP TRIGGER IF EXISTS {trigger}")


def _allow_updates(dialect: str) -> None:
    _drop_refusal(dialect, "triage_refuse", "cairnq_tasks")


def test_one_refused_row_does_not_stop_the_operation(cairnq_db: Any, dialect: str, start_worker: Any) -> None:
    ids = sorted(make_failed(1500, "bad"))
    user = User.objects.create_superuser("operator", password="pw")
    _refuse_updates_of(ids[10], dialect)
    try:
        op = operation(user, "retry_reset", {"queue": "bad"}, 1500)
        start_worker("--queue", "bad")

        def done() -> bool:
            op.refresh_from_db()
            return op.state == "done"

        wait_until(done, 60, what="bulk retry done")
    finally:
        _allow_updates(dialect)
    assert (op.processed, op.changed, op.errors) == (1500, 1499, 1)
    assert ids[10] in op.last_error and "refused for the test" in op.last_error
    assert Task.objects.get(pk=ids[10]).status == "failed"
    assert Task.objects.filter(queue="bad", status="queued", attempt=0).count() == 1499
    assert LogEntry.objects.filter(user=user).count() == 1499


def test_a_canceled_operation_is_left_alone(cairnq_db: Any, start_worker: Any) -> None:
    make_failed(10, "stopped")
    user = User.objects.create_superuser("operator", password="pw")
    op = operation(user, "retry", {"queue": "stopped"}, 10)
    BulkOperation.objects.filter(pk=op.pk).update(state="canceled")
    later = operation(user, "retry", {"queue": "nothing-here"}, 0)
    start_worker("--queue", "stopped")

    def later_done() -> bool:
        later.refresh_from_db()
        return later.state == "done"

    wait_until(later_done, 30, what="the open operation done")
    assert Task.objects.filter(queue="stopped", status="failed").count() == 10


def test_the_worker_prunes_old_error_minutes(cairnq_db: Any, start_worker: Any) -> None:
    now = int(time.time() * 1000)
    now -= now % MINUTE_MS
    fields = {"queue": "q", "name": "n", "error_type": "E", "message": "m", "failed": 1}
    old = ErrorMinute.objects.create(minute_ms=now - 2 * 86_400_000, **fields)
    recent = ErrorMinute.objects.create(minute_ms=now - 3_600_000, **fields)
    start_worker("--queue", "q", overrides={"HISTORY_KEEP_MS": 86_400_000})
    wait_until(lambda: not ErrorMinute.objects.filter(pk=old.pk).exists(), 20, what="old error minute pruned")
    assert ErrorMinute.objects.filter(pk=recent.pk).exists()


def test_an_operation_with_an_unusable_filter_ends_and_the_next_runs(cairnq_db: Any, start_worker: Any) -> None:
    make_failed(3, "next")
    user = User.objects.create_superuser("operator", password="pw")
    broken = operation(user, "retry", {"no_such_key": "x"}, 0)
    following = operation(user, "retry", {"queue": "next"}, 3)
    start_worker("--queue", "next")

    def following_done() -> bool:
        following.refresh_from_db()
        return following.state == "done"

    wait_until(following_done, 30, what="the operation after the broken one done")
    broken.refresh_from_db()
    assert broken.state == "canceled" and "unusable filter" in broken.last_error
    assert following.changed == 3


def test_an_operation_whose_user_was_deleted_still_runs_and_says_so(cairnq_db: Any, start_worker: Any) -> None:
    # The admin log needs its user: a deleted one once failed every chunk at
    # commit, so the operation stayed pending and blocked every later one.
    make_failed(20, "orphan")
    make_failed(3, "after")
    user = User.objects.create_superuser("gone", password="pw")
    orphan = operation(user, "retry", {"queue": "orphan"}, 20)
    other = User.objects.create_superuser("operator", password="pw")
    after = operation(other, "retry", {"queue": "after"}, 3)
    user.delete()
    start_worker("--queue", "orphan")

    def both_done() -> bool:
        orphan.refresh_from_db()
        after.refresh_from_db()
        return orphan.state == "done" and after.state == "done"

    wait_until(both_done, 30, what="both operations done")
    assert orphan.changed == 20 and "'gone' no longer exists" in orphan.last_error
    assert Task.objects.filter(queue="orphan", status="queued").count() == 20
    assert after.changed == 3 and LogEntry.objects.filter(user=other).count() == 3


def _refuse_admin_log(dialect: str) -> None:
    with connection.cursor() as cursor:
        if dialect == "postgres":
            cursor.execute(
                "CREATE FUNCTION log_refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
                " BEGIN RAISE EXCEPTION 'log refused for the test'; END $$"
            )
            cursor.execute(
                "CREATE TRIGGER log_refuse BEFORE INSERT ON django_admin_log FOR EACH ROW EXECUTE FUNCTION log_refuse()"
            )
        else:
            cursor.execute(
                "CREATE TRIGGER log_refuse BEFORE INSERT ON django_admin_log"
                " BEGIN SELECT RAISE(ABORT, 'log refused for the test'); END"
            )


def _allow_admin_log(dialect: str) -> None:
    _drop_refusal(dialect, "log_refuse", "django_admin_log")


def test_an_operation_that_keeps_failing_is_stopped_and_the_next_runs(cairnq_db: Any, dialect: str, store: Any) -> None:
    from cairnq_django.worker.bulk_operations import advance

    make_failed(5, "stuck")
    user = User.objects.create_superuser("operator", password="pw")
    stuck = operation(user, "retry", {"queue": "stuck"}, 5)
    following = operation(user, "retry", {"queue": "none-here"}, 0)
    _refuse_admin_log(dialect)
    try:
        assert advance(store, worker_id="w-test") is True
        stuck.refresh_from_db()
        assert stuck.state == "canceled" and "log refused for the test" in stuck.last_error, stuck.last_error
        # Its chunk was undone whole: no task changed without its log entry.
        assert Task.objects.filter(queue="stuck", status="failed").count() == 5
        assert advance(store, worker_id="w-test") is True
        following.refresh_from_db()
        assert following.state == "done"
        assert advance(store, worker_id="w-test") is False
    finally:
        _allow_admin_log(dialect)  # the trigger outlives the test's rows: later tests log too
