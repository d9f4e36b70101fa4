"""One attempt at one task, as the worker tracks it: lease, settlement, cancel, payload.

The worker (loop, executor, heartbeat, settler) and ``run_until_idle`` hold
``Attempt`` objects; a handler sees only ``attempt.context``, the
``TaskContext`` built over it. Everything that decides whether a write may
still go out lives here:

* lease lost: a write or a heartbeat found the row no longer ours, or the
  call outran ``max_run_ms``. From then on every owned write raises
  ``LostLease`` locally, because the same worker may have re-claimed the task
  under the same worker id and a stale handler's write would pass the
  database's ownership check.
* settling / settled: one writer at a time may write the final state
  (``begin_settle`` reserves it, ``end_settle`` records how it went); once
  settled, further owned writes are refused the same way.
* cancel seen: monotonic, fed by heartbeats and write answers.

Flags are public attributes for cheap reads (the heartbeat scans every
attempt each beat); they change only through the methods below, under one
lock shared by all attempts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING

from ..exceptions import LostLease
from ..protocol.backoff import DEFAULT_RETRY_BACKOFF_MAX_MS, DEFAULT_RETRY_BACKOFF_MS
from ..protocol.payload import DEFERRED_SIZE_ATTR, byte_size
from ..tasks.context import TaskContext

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from ..models import Task
    from ..store.base import Store

__all__ = ["Attempt", "AttemptOwner"]

# Flag transitions are rare and tiny: one lock for every attempt is cheaper
# than a lock each when batches of 256 arrive at once.
_state_lock = threading.Lock()


class AttemptOwner:
    """What an attempt needs from whoever runs it: the store, its worker id and lease, and two callbacks.

    Shared by every attempt of one worker (or one inline run), so an attempt
    carries a single reference instead of copies of these settings.
    """

    # The threads the async twins write on; None: ``asyncio.to_thread``.
    db_executor: Executor | None = None
    # Held by the worker's own SQLite writes (None elsewhere); see load_payload.
    write_lock: threading.Lock | threading.RLock | None = None

    def __init__(
        self,
        store: Store,
        worker_id: str,
        lease_ms: int,
        *,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = DEFAULT_RETRY_BACKOFF_MAX_MS,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms

    def lease_lost(self, attempt: Attempt) -> None:
        """Called once, when an attempt first learns its lease is gone."""

    def settled(self, attempt: Attempt, status: str) -> None:
        """Called when the handler settled its task itself (``succeed``/``fail``/``atomic``)."""


class Attempt:
    """The worker's state for one claimed task; ``context`` is the handler's view of it."""

    __slots__ = (
        "_context",
        "_lost_event",
        "cancel_seen",
        "lost",
        "owner",
        "settled",
        "settling",
        "status",
        "task",
    )

    def __init__(self, task: Task, owner: AttemptOwner) -> None:
        self.task = task
        self.owner = owner
        self.lost = False
        self._lost_event: threading.Event | None = None
        self.cancel_seen = task.cancel_requested_at_ms is not None
        self.settled = False
        # True while some thread writes this task's final state: the heartbeat
        # must not read that write's effect (the row leaving ``running``) as a
        # lost lease.
        self.settling = False
        # The final status once settled (succeeded / failed / canceled / queued).
        self.status: str | None = None
        self._context: TaskContext | None = None

    def __repr__(self) -> str:
        task = self.task
        return f"<Attempt {task.name} {task.id} attempt={task.attempt}>"

    @property
    def context(self) -> TaskContext:
        """The handler's ``TaskContext``, built on first use (tasks that never reach a handler need none)."""
        context = self._context
        if context is None:
            # Only the thread about to call the handler asks; a race would at
            # worst build two equal views of the same state.
            context = self._context = TaskContext(self)
        return context

    @property
    def busy(self) -> bool:
        """Settled, or a final write in progress: the row leaving ``running`` is ours."""
        return self.settled or self.settling

    # ---- lease ---------------------------------------------------------------
    def lost_event(self) -> threading.Event:
        """Return an event that is set once the lease is lost (made on first request)."""
        with _state_lock:
            if self._lost_event is None:
                self._lost_event = threading.Event()
                if self.lost:
                    self._lost_event.set()
            return self._lost_event

    def mark_lost(self) -> bool:
        """Flag the lease lost; True the first time (the caller then reports it)."""
        with _state_lock:
            if self.lost:
                return False
            self.lost = True
            event = self._lost_event
        if event is not None:
            event.set()
        return True

    def lose(self) -> None:
        """Flag the lease lost and tell the owner (log + signal), once."""
        if self.mark_lost():
            self.owner.lease_lost(self)

    def observe_cancel(self, cancel_requested_at_ms: int | None) -> None:
        if cancel_requested_at_ms is not None:
            self.cancel_seen = True

    # ---- settlement ------------------------------------------------------------
    def begin_settle(self) -> bool:
        """Reserve the right to write this task's final state; False if taken or done."""
        with _state_lock:
            if self.settled or self.settling:
                return False
            self.settling = True
            return True

    def reserve(self) -> bool:
        """``begin_settle`` for an attempt that still holds its lease; False otherwise."""
        return not self.lost and self.begin_settle()

    def end_settle(self, status: str | None) -> None:
        """Record how a settlement write went (None: it did not happen)."""
        with _state_lock:
            self.settling = False
            if status is not None:
                self.settled = True
                self.status = status

    @staticmethod
    def end_settle_many(written: list[tuple[Attempt, str]]) -> None:
        """``end_settle`` of each attempt with the status its write left, under one take of the lock."""
        with _state_lock:
            for attempt, status in written:
                attempt.settling = False
                attempt.settled = True
                attempt.status = status

    def handler_settled(self, status: str) -> None:
        """Report a settlement the handler wrote itself to the owner."""
        self.owner.settled(self, status)

    # ---- the write gate ----------------------------------------------------------
    def check_lease(self) -> None:
        """Raise ``LostLease`` if the lease is known lost."""
        if self.lost:
            raise LostLease(self.task.id)

    def check_writable(self) -> None:
        """Raise ``LostLease`` unless an owned write may go out now.

        Settled counts as "not yours any more": the statement would match no
        row and be misread as a lost lease, so it is refused locally instead.
        """
        if self.lost or self.settled or self.settling:
            raise LostLease(self.task.id)

    def write(self, write: Callable[[], Task]) -> Task:
        """Run an owned write (progress, heartbeat) through the gate."""
        self.check_writable()
        return self.settle_write(write)

    def settle_write(self, write: Callable[[], Task]) -> Task:
        """Run an owned write; note the answer's cancel flag, or the lost lease it reports."""
        try:
            row = write()
        except LostLease:
            self.lose()
            raise
        self.observe_cancel(row.cancel_requested_at_ms)
        return row

    # ---- large payloads ------------------------------------------------------------
    # A claim leaves a large payload in the database: the Task then has no
    # payload attribute, only its size. It is fetched on first use, on the
    # handler's thread, and dropped when the call ends, so a worker holds one
    # such payload per running call, and only while it runs.
    @property
    def payload_deferred(self) -> bool:
        return "payload" not in self.task.__dict__

    def load_payload(self) -> None:
        """Fetch the payload the claim left in the database (no-op if loaded)."""
        task = self.task
        if "payload" in task.__dict__:
            return
        # On SQLite each of the worker's writes to such a row briefly holds
        # about three copies of its payload; reading under the worker's write
        # lock keeps those apart from this read's own two copies.
        lock = self.owner.write_lock
        try:
            with lock if lock is not None else nullcontext():
                task.payload = self.owner.store.get_payload(task.id)
        except LostLease:
            self.lose()
            raise

    def drop_payload(self) -> None:
        """Forget a payload ``load_payload`` fetched; a later use fetches it again."""
        task = self.task
        if DEFERRED_SIZE_ATTR in task.__dict__:
            task.__dict__.pop("payload", None)

    def payload_bytes(self) -> int:
        """Return the payload's size for the byte budget, without fetching it."""
        size: int | None = self.task.__dict__.get(DEFERRED_SIZE_ATTR)
        return byte_size(self.task.payload) if size is None else size
