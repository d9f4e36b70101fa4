"""Advance the admin's bulk retries and cancels, one chunk at a time, from a worker's housekeeping.

An operation (``BulkOperation``) names an action and a task filter; each
``advance`` takes the oldest open one under a row lock (``FOR UPDATE SKIP
LOCKED`` on PostgreSQL, so workers share the open operations; on SQLite the
transaction writes first and so holds the database's write lock), reads the
next ``CHUNK`` matching ids after its cursor in id order, changes them with
the store's ``retry_many`` / ``cancel_many`` (the guarded statements the
admin's actions use), writes one admin ``LogEntry`` per changed task for the
user who asked, and moves the cursor, all in one transaction: a worker killed
mid-chunk leaves the chunk to the next worker, never half-counted.

A chunk the database refuses is retried one id at a time, each in a
savepoint: the ids it still refuses are counted in ``errors`` (the last
message kept) and passed, so one bad row never stops an operation. An
operation whose chunk fails for a reason of its own (not a lost connection)
is stopped with that reason on its page, so it never blocks the ones after it;
a requesting user deleted meanwhile costs the admin log, not the operation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, InterfaceError, OperationalError, transaction
from django.db.models import F

from ..client.task_filter import matching_tasks
from ..models import OPEN_BULK_STATES, BulkAction, BulkOperation, BulkState, Task, TaskStatus

if TYPE_CHECKING:
    from ..store.base import Store

logger = logging.getLogger("cairnq_django.worker")

# Ids read and changed per transaction: one retry_many / cancel_many and one log INSERT.
CHUNK = 1_000
# Kept of a refused row's error message.
ERROR_CHARS = 500


def advance(store: Store, *, worker_id: str, write_lock: Any = None, chunk: int = CHUNK) -> bool:
    """Move the oldest open operation one chunk on; True if there was one (call again soon)."""
    run: Callable[[Callable[[], bool]], bool] = getattr(store, "_run", lambda operation: operation())
    with write_lock if write_lock is not None else nullcontext():
        try:
            return run(lambda: _advance_once(store, worker_id, chunk))
        except (OperationalError, InterfaceError):
            raise  # the database is away: housekeeping backs off and the chunk is tried again
        except DatabaseError as exc:
            # Failing again on every pass would hold back every later operation.
            return run(lambda: _stop_oldest(store, f"stopped: {type(exc).__name__}: {exc}"))


def _stop_oldest(store: Store, reason: str) -> bool:
    """End the open operation a chunk failed on (the oldest one no other worker holds)."""
    with transaction.atomic(using=store.alias):
        operation = _take(store)
        if operation is None:
            return False
        _end(store, operation, BulkState.CANCELED, reason[:ERROR_CHARS])
    return True


def _take(store: Store) -> BulkOperation | None:
    """Lock and return the oldest open operation no other worker holds."""
    operations = BulkOperation.objects.using(store.alias).filter(state__in=OPEN_BULK_STATES).order_by("id")
    if store.dialect == "postgres":
        return operations.select_for_update(skip_locked=True).first()
    # A write first: the transaction holds SQLite's write lock before it reads.
    oldest = operations.values("id")[:1]
    if not BulkOperation.objects.using(store.alias).filter(id__in=oldest).update(updated_at_ms=F("updated_at_ms")):
        return None
    return operations.first()


def _advance_once(store: Store, worker_id: str, chunk: int) -> bool:
    with transaction.atomic(using=store.alias):
        operation = _take(store)
        if operation is None:
            return False
        try:
            tasks = matching_tasks(operation.filter, Task.objects.using(store.alias))
        except (ValueError, TypeError, AttributeError) as exc:
            # A filter the admin never writes (a row made by hand): end it, or it would block the rest.
            _end(store, operation, BulkState.CANCELED, f"unusable filter: {exc}"[:ERROR_CHARS])
            return True
        if operation.cursor is not None:
            tasks = tasks.filter(pk__gt=operation.cursor)
        ids = [str(pk) for pk in tasks.order_by("pk").values_list("pk", flat=True)[:chunk]]
        if ids:
            changed, errors, last_error = _apply(store, operation, ids)
            operation.cursor = ids[-1]
            operation.processed += len(ids)
            operation.changed += changed
            operation.errors += errors
            if last_error:
                operation.last_error = last_error
        now_ms = store.now_ms()
        operation.worker_id = worker_id
        operation.updated_at_ms = now_ms
        if len(ids) < chunk:
            operation.state = BulkState.DONE
            operation.finished_at_ms = now_ms
        else:
            operation.state = BulkState.RUNNING
        operation.save(using=store.alias)
    if operation.state == BulkState.DONE:
        logger.info(
            "bulk operation %s (%s) done: %d looked at, %d changed, %d refused",
            operation.pk, operation.action, operation.processed, operation.changed, operation.errors,
        )
    return True


def _end(store: Store, operation: BulkOperation, state: str, last_error: str) -> None:
    now_ms = store.now_ms()
    operation.state, operation.last_error = state, last_error
    operation.updated_at_ms = operation.finished_at_ms = now_ms
    operation.save(using=store.alias)
    logger.error("bulk operation %s ended: %s", operation.pk, last_error)


def _change(store: Store, action: str, ids: list[str]) -> list[tuple[Task, str]]:
    """Change ``ids`` in one statement; return each changed row with its log message."""
    if action == BulkAction.CANCEL:
        return [
            (row, "Cancel requested (bulk)." if row.status == TaskStatus.RUNNING else "Canceled (bulk).")
            for row in store.cancel_many(ids)
        ]
    reset = action == BulkAction.RETRY_RESET
    message = "Re-queued, attempts reset (bulk)." if reset else "Re-queued (bulk)."
    return [(row, message) for row in store.retry_many(ids, reset_attempt=reset)]


def _apply(store: Store, operation: BulkOperation, ids: list[str]) -> tuple[int, int, str]:
    """Change the chunk, row by row where the database refuses it whole; log what changed.

    Returns ``(changed, refused, last refusal)``.
    """
    from ..admin.audit import log_task_changes  # the admin's log; only an admin creates operations

    errors = 0
    last_error = ""
    try:
        with transaction.atomic(using=store.alias):
            entries = _change(store, operation.action, ids)
    except Exception as exc:  # noqa: BLE001 - narrowed down row by row below
        logger.warning("bulk operation %s: a chunk was refused (%s); going row by row", operation.pk, exc)
        entries = []
        for task_id in ids:
            try:
                with transaction.atomic(using=store.alias):
                    entries += _change(store, operation.action, [task_id])
            except Exception as row_exc:  # noqa: BLE001 - counted, and the operation goes on
                errors += 1
                last_error = f"{task_id}: {row_exc}"[:ERROR_CHARS]
    if entries:
        user_pk = _user_pk(operation.requested_by_pk)
        if _user_exists(user_pk):
            log_task_changes(user_pk, entries)
        else:
            # The log needs its user; the operator's request still stands.
            last_error = f"user {operation.requested_by!r} no longer exists: changes made without admin log entries"
    return len(entries), errors, last_error


def _user_exists(pk: Any) -> bool:
    from django.contrib.auth import get_user_model  # only an admin (so auth) creates operations

    return get_user_model()._default_manager.filter(pk=pk).exists()


def _user_pk(text: str) -> Any:
    """The requesting user's pk in its own type (stored as text: the user table may be elsewhere)."""
    from django.contrib.auth import get_user_model  # only an admin (so auth) creates operations

    pk_field = get_user_model()._meta.pk
    return text if pk_field is None else pk_field.to_python(text)
