"""Write the final state of tasks whose handler returned or raised, coalesced.

Handlers that finish close together are settled by ONE ``complete_many``,
ONE ``fail_many`` and ONE ``snooze_many`` statement: the settler thread takes
everything queued the moment it wakes and writes it at once, so when idle a
single completion is written immediately (no added latency) and under load
many share a statement.

Every write is checked against the worker id by the store; an id missing from
the answer lost its lease: that attempt is flagged, the loss is logged and
``task_lease_lost`` is sent, and nothing more is written for it.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import InterfaceError, OperationalError, transaction

from ..exceptions import LostLease
from ..store.base import Failure
from . import connections as _db
from ..protocol.backoff import Backoff
from ..protocol.envelopes import unserializable_envelope
from ..workflows.advance import is_node_task, tasks_ended
from .attempt import Attempt
from .outcomes import Settlement

if TYPE_CHECKING:
    from ..store.base import Store

logger = logging.getLogger("cairnq_django.worker")

# Errors that mean "the database went away": retry the same writes later.
_TRANSIENT = (OperationalError, InterfaceError)
# Most rows one statement carries; more wait for the next round.
# Retrying a database that went away: 0.25 s doubling to 5 s, jittered.
RETRY_FIRST_S = 0.25
RETRY_CAP_S = 5.0

_MAX_ROWS = 2048


class Settler:
    """The thread that turns finished handler calls into settlement statements."""

    def __init__(
        self,
        store: Store,
        worker_id: str,
        *,
        application_name: str,
        lease_ms: int,
        on_settled: Callable[[list[tuple[Settlement, str]]], None],
        on_lost: Callable[[Settlement], None],
        write_lock: Any = None,
        on_taken: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.application_name = application_name
        self.lease_s = lease_ms / 1000
        self.on_settled = on_settled
        self.on_lost = on_lost
        self.write_lock = write_lock
        # Told each time the thread takes the waiting settlements into a write:
        # a claim loop held back by the backlog may go on.
        self.on_taken = on_taken
        self._pending: collections.deque[Settlement] = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._busy = 0
        self._stopping = False
        self._thread = threading.Thread(
            target=self._run, name=f"{application_name}:settle", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def put(self, items: list[Settlement]) -> None:
        if not items:
            return
        now = time.monotonic()
        for item in items:
            item.queued_at = now
        with self._cond:
            self._pending.extend(items)
            self._cond.notify()

    @property
    def backlog(self) -> int:
        """Settlements waiting for the thread, not yet taken into a write."""
        with self._cond:
            return len(self._pending)

    @property
    def idle(self) -> bool:
        with self._cond:
            return not self._pending and self._busy == 0

    def wait_idle(self, timeout: float) -> bool:
        """Wait until everything queued has been written (or given up); True if so."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
            return True

    def stop(self, timeout: float) -> None:
        """Flush what is queued (up to ``timeout``), then end the thread."""
        self.wait_idle(timeout)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=1.0)

    # ---- the thread --------------------------------------------------------------
    def _run(self) -> None:
        # The store runs each write on the worker's shared connection
        # (connections.py), which also replaces one an error left broken.
        # This thread's own connection is for the signal receivers it calls
        # (task_finished, ...): user code, named like handler threads'.
        _db.tag_thread(self.store.alias, f"{self.application_name}:h")
        try:
            self._settle_forever()
        finally:
            _db.close_quietly(self.store.alias)

    def _settle_forever(self) -> None:
        backoff = Backoff(RETRY_FIRST_S, RETRY_CAP_S)
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending and self._stopping:
                    return
                batch = [
                    self._pending.popleft()
                    for _ in range(min(len(self._pending), _MAX_ROWS))
                ]
                self._busy = len(batch)
            if self.on_taken is not None:
                self.on_taken()
            try:
                while batch:
                    try:
                        self._write(batch)
                        batch = []
                        if backoff.reset():
                            logger.info("settlement writes resumed")
                    except _TRANSIENT as exc:
                        batch = self._expire(batch)
                        if backoff.failures == 0:
                            logger.error(
                                "settlement write failed, retrying: %s", exc
                            )
                        if self._stopping:
                            # Shutting down: the leases will expire and the
                            # tasks be redelivered; do not hold the exit.
                            for item in batch:
                                self._lost(item)
                            break
                        time.sleep(backoff.next_delay())
            finally:
                with self._cond:
                    self._busy = 0
                    self._cond.notify_all()

    def _expire(self, batch: list[Settlement]) -> list[Settlement]:
        # A write retried for longer than the lease can no longer succeed: the
        # task was recovered and redelivered meanwhile.
        now = time.monotonic()
        keep = []
        for item in batch:
            if now - item.queued_at > self.lease_s:
                logger.warning(
                    "giving up settling task=%s name=%s attempt=%s: database unavailable past the lease",
                    item.attempt.task.id,
                    item.attempt.task.name,
                    item.attempt.task.attempt,
                )
                self._lost(item)
            else:
                keep.append(item)
        return keep

    def _write(self, batch: list[Settlement]) -> None:
        """Write ``batch``, one statement per kind; each kind written leaves ``batch``.

        So when a later kind meets a database error, the retry writes only
        what is still unwritten (a completion written twice would read as lost).
        """
        completes: list[Settlement] = []
        fails: list[Settlement] = []
        snoozes: list[Settlement] = []
        for item in batch:
            if item.snoozed:
                snoozes.append(item)
            elif item.failure is not None:
                fails.append(item)
            else:
                completes.append(item)
        worker_id = self.worker_id
        results = [(item.attempt.task.id, item.result_json) for item in completes]
        failures = [item.failure for item in fails if item.failure is not None]
        delays = [(item.attempt.task.id, item.snooze_ms or 0) for item in snoozes]
        groups: list[tuple[list[Settlement], Callable[[], dict[str, str]], str]] = [
            (completes, self._advancing(completes, lambda: self.store.complete_many(worker_id, results)), "completion"),
            (fails, self._advancing(fails, lambda: self.store.fail_many(worker_id, failures)), "failure"),
            (snoozes, lambda: self.store.snooze_many(worker_id, delays), "snooze"),
        ]
        for items, write, what in groups:
            if not items:
                continue
            self._write_group(items, write, what)
            written = {id(item) for item in items}
            batch[:] = [item for item in batch if id(item) not in written]

    def _advancing(
        self, items: list[Settlement], write: Callable[[], dict[str, str]]
    ) -> Callable[[], dict[str, str]]:
        """``write``, and for the workflow nodes among ``items`` their workflows' advance, in one transaction.

        So a node's children are released exactly when its settlement
        commits (docs/workflows.md); a settlement of no node is written alone.
        """
        nodes = {item.attempt.task.id for item in items if is_node_task(item.attempt.task.metadata)}
        if not nodes:
            return write
        alias = self.store.alias

        def both() -> dict[str, str]:
            with transaction.atomic(using=alias):
                answer = write()
                tasks_ended(alias, [(task_id, status) for task_id, status in answer.items() if task_id in nodes])
            return answer

        return lambda: self.store.run_with_connection(both)

    def _write_group(self, items: list[Settlement], write: Callable[[], dict[str, str]], what: str) -> None:
        """Write one kind of settlement in one statement; record each task's answer."""
        try:
            answer = self._locked(write)
        except _TRANSIENT:
            raise
        except Exception as exc:  # noqa: BLE001
            # One bad row (e.g. a value the column refuses) must not sink the rest.
            logger.warning("batched %s write failed (%s); settling one by one", what, exc)
            answer = self._one_by_one(items)
        self._record(items, answer)

    def _locked(self, fn: Callable[[], Any]) -> Any:
        if self.write_lock is None:
            return fn()
        with self.write_lock:
            return fn()

    def _one_by_one(self, items: list[Settlement]) -> dict[str, str]:
        answer: dict[str, str] = {}
        for item in items:
            try:
                status = self._settle_one(item)
            except LostLease:
                continue
            except _TRANSIENT:
                raise
            except Exception:  # reported against this task; the others go on
                logger.exception(
                    "could not settle task=%s name=%s", item.attempt.task.id, item.attempt.task.name
                )
                continue
            answer[item.attempt.task.id] = status
        return answer

    def _settle_one(self, item: Settlement) -> str:
        task_id = item.attempt.task.id
        if item.snoozed:
            delay = [(task_id, item.snooze_ms or 0)]
            answer = self._locked(lambda: self.store.snooze_many(self.worker_id, delay))
            if task_id not in answer:
                raise LostLease(task_id)
            return str(answer[task_id])
        failure = item.failure
        if failure is None:
            result_json = item.result_json
            try:
                row = self._locked(
                    lambda: self.store.complete(task_id, self.worker_id, result_json)
                )
            except (LostLease, *_TRANSIENT):
                raise
            except Exception as exc:  # noqa: BLE001
                # The database refused the encoded result: deterministic, so permanent.
                failure = item.failure = Failure(
                    task_id, unserializable_envelope(str(exc)), retryable=False
                )
            else:
                return row.status
        final = failure
        row = self._locked(
            lambda: self.store.fail(
                task_id,
                self.worker_id,
                final.error,
                retryable=final.retryable,
                delay_ms=final.delay_ms,
            )
        )
        return row.status

    def _record(self, items: list[Settlement], answer: dict[str, str]) -> None:
        """Mark each written attempt settled and hand them all over at once; the others lost their lease."""
        written: list[tuple[Settlement, str]] = []
        for item in items:
            status = answer.get(item.attempt.task.id)
            if status is None:
                self._lost(item)
            else:
                written.append((item, status))
        if written:
            Attempt.end_settle_many([(item.attempt, status) for item, status in written])
            self.on_settled(written)

    def _lost(self, item: Settlement) -> None:
        item.attempt.end_settle(None)
        self.on_lost(item)
