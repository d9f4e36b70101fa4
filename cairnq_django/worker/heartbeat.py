"""Keep the leases of every task in flight alive, and the worker's registry row fresh: ONE write per beat.

Every ``max(50, lease_ms // 3)`` ms (or ``HEARTBEAT_INTERVAL_MS``) the thread
renews all tasks this worker holds, not settled and not lost, and refreshes
the worker's row in ``cairnq_django_worker`` with a single ``worker_beat``
(one statement on PostgreSQL, one transaction on SQLite). The first beat runs
at start-up and registers the worker; an idle worker still beats, to stay
listed as live. A task present in the answer records its cancel flag on
its attempt (so ``ctx.cancel_requested`` needs no query); a task absent from
it lost its lease unless it is being settled right now, and only that attempt
is flagged. A failed beat is logged and the next one still runs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import Error as DatabaseError

from . import connections as _db

if TYPE_CHECKING:
    from ..store.base import Store
    from .attempt import Attempt
    from .presence import Presence

logger = logging.getLogger("cairnq_django.worker")


def beat_interval_ms(lease_ms: int, override: int | None = None) -> int:
    """Return the heartbeat interval: a third of the lease (two beats of slack)."""
    if override is not None:
        return max(1, int(override))
    return max(50, lease_ms // 3)


class Heartbeat:
    """The heartbeat thread."""

    def __init__(
        self,
        store: Store,
        worker_id: str,
        *,
        lease_ms: int,
        interval_ms: int,
        live: Callable[[], list[Attempt]],
        on_lost: Callable[[Attempt], None],
        application_name: str,
        write_lock: Any = None,
        presence: Presence | None = None,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.interval = interval_ms / 1000
        self.live = live
        self.on_lost = on_lost
        self.application_name = application_name
        self.write_lock = write_lock
        # The registry row this beat keeps fresh; None: renew leases only.
        self.presence = presence
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"{application_name}:beat", daemon=True
        )
        self.beats = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)

    def _run(self) -> None:
        # The store runs each beat on the worker's shared connection
        # (connections.py), which also replaces one an error left broken.
        # This thread's own connection is for the task_lease_lost receivers
        # it calls: user code, named like handler threads'.
        _db.tag_thread(self.store.alias, f"{self.application_name}:h")
        failing = False
        try:
            # A registered worker's first beat is its registration, right at start-up.
            if self.presence is not None:
                failing = self._tick(failing)
            while not self._stop.wait(self.interval):
                failing = self._tick(failing)
        finally:
            _db.close_quietly(self.store.alias)

    def _tick(self, failing: bool) -> bool:
        """Run one beat; return whether the database is failing (to log a failure once)."""
        attempts = [
            attempt for attempt in self.live() if not attempt.settled and not attempt.lost
        ]
        # Without leases to renew, the beat still refreshes the registry row.
        if not attempts and self.presence is None:
            return failing
        try:
            renewed = self._beat([attempt.task.id for attempt in attempts])
        except DatabaseError as exc:
            if not failing:
                logger.error(
                    "heartbeat failed (%d task(s) in flight), retrying: %s",
                    len(attempts),
                    exc,
                )
            return True
        if failing:
            logger.info("heartbeat recovered")
        self.beats += 1
        for attempt in attempts:
            task = attempt.task
            if task.id in renewed:
                cancel_at = renewed[task.id]
                if cancel_at is not None and not attempt.cancel_seen:
                    logger.info(
                        "cancel requested: task=%s name=%s attempt=%s",
                        task.id,
                        task.name,
                        task.attempt,
                    )
                attempt.observe_cancel(cancel_at)
            elif not attempt.busy:
                # Settled (or being settled) while the beat was in flight
                # is not a loss; anything else is.
                self.on_lost(attempt)
        return False

    def _beat(self, task_ids: list[str]) -> dict[str, int | None]:
        started = time.monotonic()
        with self.write_lock if self.write_lock is not None else contextlib.nullcontext():
            if self.presence is None:
                renewed = self.store.heartbeat_batch(task_ids, self.worker_id, self.lease_ms)
            else:
                renewed = self.store.worker_beat(self.presence.record(), task_ids, self.lease_ms)
        took = time.monotonic() - started
        if took > self.interval:
            logger.warning(
                "heartbeat of %d task(s) took %.0f ms", len(task_ids), took * 1000
            )
        return renewed
