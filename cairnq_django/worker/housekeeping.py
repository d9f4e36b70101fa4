"""Worker housekeeping, on a thread of its own: retention, unserved names, pruning.

* **Retention** (protocol 4.15): with ``CAIRNQ["RETENTION"]`` set, sweep every
  ``RETENTION_INTERVAL_MS``, the first sweep one interval after start-up.
* **Unserved names** (fault plan F18 b): at start-up and then every
  ``UNSERVED_CHECK_INTERVAL_MS``, look for queued tasks in the worker's queues
  whose name none of its handlers serves. A claim never takes such rows, so
  without a word from the worker they would wait silently; each name is
  reported once per process, so a long-lived backlog does not flood the log.
* **Fleet starts** (docs/limits.md): with fleet-limited names served, every
  ``FLEET_PRUNE_INTERVAL_S`` delete the logged starts that can no longer count.
* **Worker registry** (docs/worker.md): delete the rows of workers not seen
  for ``WORKER_KEEP_MS``, checked a tenth as often as that (between 1 s and
  10 min), the first time one such interval after start-up.
* **Per-minute history** (docs/admin.md): every ``history.FLUSH_INTERVAL_S``
  add this worker's counts to ``cairnq_django_queue_minute``; at start-up and
  then every ``HISTORY_PRUNE_INTERVAL_S`` delete minutes older than
  ``HISTORY_KEEP_MS`` (queue and error minutes alike).
* **Bulk operations** (docs/admin.md): every ``BULK_POLL_S``, or at once while
  one is open, move the oldest open admin retry/cancel one chunk on
  (``bulk_operations``).

A failed job is logged and runs again at its next time. Each statement runs
on the connection the worker shares with settlement and the heartbeat
(connections.py), in bounded batches, so a long purge never holds it for long
and never delays claims.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

from . import connections as _db
from ..client.retention import PurgeRule, configured_rules, sweep
from ..conf import number_problem
from ..protocol.limits import MAX_WINDOW_MS
from ..tasks.registry import get_task
from . import bulk_operations
from .history import FLUSH_INTERVAL_S, QueueHistory
from ..workflows.advance import sweep as advance_stalled_workflows

if TYPE_CHECKING:
    from ..store.base import Store

logger = logging.getLogger("cairnq_django.worker")

# Often enough that a rate scope's window holds little besides its window.
FLEET_PRUNE_INTERVAL_S = 10.0
# A scope this worker does not serve may have a rate window up to a day.
UNKNOWN_SCOPE_KEEP_MS = MAX_WINDOW_MS
# Registry pruning runs every tenth of WORKER_KEEP_MS, within these bounds: a
# row outlives its keep time by a tenth at most, and the default (a day) costs
# one cheap DELETE per worker every ten minutes.
WORKER_PRUNE_MIN_S = 1.0
WORKER_PRUNE_MAX_S = 600.0
# Old minutes go a few at a time: a day's rows of a few queues are a few thousand.
HISTORY_PRUNE_INTERVAL_S = 3_600.0
# An open bulk operation is looked for this often; one found is advanced chunk after chunk.
BULK_POLL_S = 2.0
# Workflow nodes one repair pass advances at most; a full pass runs again at once.
WORKFLOW_SWEEP_ROWS = 500


def _interval_s(key: str, value: Any) -> float:
    """Return a ``CAIRNQ`` interval in seconds; raise naming ``key`` when ``conf`` refuses it."""
    problem = number_problem(key, value)
    if problem is not None:
        raise ImproperlyConfigured(f'CAIRNQ["{key}"] {problem}')
    return value / 1000


class Sweeper:
    """The housekeeping thread; started when at least one of its jobs is on."""

    def __init__(
        self,
        store: Store,
        *,
        interval_ms: int,
        application_name: str,
        queues: Sequence[str] = (),
        names: Sequence[str] = (),
        unserved_interval_ms: int | None = None,
        fleet_keep_ms: dict[str, int] | None = None,
        worker_keep_ms: int | None = None,
        history: QueueHistory | None = None,
        history_keep_ms: int | None = None,
        workflow_sweep_s: float | None = None,
    ) -> None:
        self.interval = _interval_s("RETENTION_INTERVAL_MS", interval_ms)
        # None turns the unserved-names check off.
        self.unserved_interval = (
            None
            if unserved_interval_ms is None
            else _interval_s("UNSERVED_CHECK_INTERVAL_MS", unserved_interval_ms)
        )
        self.rules: list[PurgeRule] = configured_rules()
        self.store = store
        self.application_name = application_name
        self.queues = list(queues)
        self.names = list(names)
        # Per fleet scope served here, how long its starts must be kept; None: no pruning.
        self.fleet_keep_ms = fleet_keep_ms
        # How long registry rows of gone workers are kept; None: no pruning.
        if worker_keep_ms is not None:
            _interval_s("WORKER_KEEP_MS", worker_keep_ms)  # refused with the key's name
        self.worker_keep_ms = worker_keep_ms
        # The worker's unwritten per-minute counts, and how long minutes are kept (None: forever).
        self.history = history
        if history is not None and number_problem("HISTORY_KEEP_MS", history_keep_ms) is not None:
            raise ImproperlyConfigured(
                f'CAIRNQ["HISTORY_KEEP_MS"] {number_problem("HISTORY_KEEP_MS", history_keep_ms)}'
            )
        self.history_keep_ms = history_keep_ms
        # How often the workflows' repair pass runs (None: never); see ``sweep_workflows``.
        self.workflow_sweep_s = workflow_sweep_s
        self._workflow_sweep_failing = False
        # Names already reported by this process: one warning each, ever.
        self.reported: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if (
            not self.rules
            and (self.unserved_interval is None or not self.queues)
            and self.fleet_keep_ms is None
            and self.worker_keep_ms is None
            and self.history is None
            and self.workflow_sweep_s is None
        ):
            return
        self._thread = threading.Thread(
            target=self._run, name=f"{self.application_name}:housekeeping", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        _db.tag_thread(self.store.alias, self.application_name)
        check_every = self.unserved_interval if self.queues else None
        now = time.monotonic()
        next_sweep = now + self.interval if self.rules else math.inf
        next_check = now if check_every is not None else math.inf
        next_prune = now + FLEET_PRUNE_INTERVAL_S if self.fleet_keep_ms is not None else math.inf
        prune_workers_every = self._worker_prune_interval()
        next_prune_workers = now + prune_workers_every
        next_flush = now + FLUSH_INTERVAL_S if self.history is not None else math.inf
        next_forget = now if self.history is not None and self.history_keep_ms is not None else math.inf
        next_bulk = now + BULK_POLL_S if self.history is not None else math.inf
        next_workflows = now if self.workflow_sweep_s is not None else math.inf
        try:
            while not self._stop.wait(
                max(
                    0.0,
                    min(
                        next_sweep, next_check, next_prune, next_prune_workers, next_flush, next_forget, next_bulk,
                        next_workflows,
                    )
                    - time.monotonic(),
                )
            ):
                if self.workflow_sweep_s is not None and time.monotonic() >= next_workflows:
                    more = self.sweep_workflows()
                    next_workflows = time.monotonic() + (0.0 if more else self.workflow_sweep_s)
                if self.history is not None and time.monotonic() >= next_flush:
                    self.history.flush()
                    next_flush = time.monotonic() + FLUSH_INTERVAL_S
                if time.monotonic() >= next_forget:
                    self.prune_history()
                    next_forget = time.monotonic() + HISTORY_PRUNE_INTERVAL_S
                if time.monotonic() >= next_bulk:
                    next_bulk = time.monotonic() + (0.0 if self.advance_bulk() else BULK_POLL_S)
                if time.monotonic() >= next_prune:
                    self.prune_fleet_starts()
                    next_prune = time.monotonic() + FLEET_PRUNE_INTERVAL_S
                if time.monotonic() >= next_prune_workers:
                    self.prune_workers()
                    next_prune_workers = time.monotonic() + prune_workers_every
                if check_every is not None and time.monotonic() >= next_check:
                    self.check_unserved()
                    next_check = time.monotonic() + check_every
                if time.monotonic() >= next_sweep and not self._stop.is_set():
                    self._sweep()
                    next_sweep = time.monotonic() + self.interval
                _db.close_quietly(self.store.alias)
        finally:
            _db.close_quietly(self.store.alias)

    def sweep_workflows(self) -> bool:
        """Advance the workflow nodes whose task ended unseen; True when a full batch was found (go again).

        The settling worker advances its own nodes in the settlement's
        transaction; this pass finds those another SDK's worker, an operator
        or a purge ended, and any a crash left behind (workflows/advance.py).
        """
        try:
            found = self.store.run_with_connection(lambda: advance_stalled_workflows(self.store.alias, WORKFLOW_SWEEP_ROWS))
        except Exception as exc:  # noqa: BLE001 - reported once; the next pass tries again
            if not self._workflow_sweep_failing:
                logger.error("the workflow repair pass failed, retrying: %s", exc)
            self._workflow_sweep_failing = True
            _db.close_quietly(self.store.alias)
            return False
        self._workflow_sweep_failing = False
        return found >= WORKFLOW_SWEEP_ROWS

    def prune_fleet_starts(self) -> int:
        """Delete the logged fleet starts that can no longer count (until none is left)."""
        deleted = 0
        try:
            while not self._stop.is_set():
                batch = self.store.prune_fleet_starts(self.fleet_keep_ms or {}, UNKNOWN_SCOPE_KEEP_MS)
                deleted += batch
                if batch < 10_000:
                    break
        except Exception as exc:  # noqa: BLE001 - the next prune still runs
            logger.error("pruning fleet starts failed: %s", exc)
        if deleted:
            logger.debug("pruned %d fleet start(s)", deleted)
        return deleted

    def _worker_prune_interval(self) -> float:
        if self.worker_keep_ms is None:
            return math.inf
        return min(WORKER_PRUNE_MAX_S, max(WORKER_PRUNE_MIN_S, self.worker_keep_ms / 10_000))

    def prune_workers(self) -> int:
        """Delete the registry rows of workers not seen for ``WORKER_KEEP_MS``."""
        if self.worker_keep_ms is None:
            return 0
        try:
            deleted = self.store.prune_workers(self.worker_keep_ms)
        except Exception as exc:  # noqa: BLE001 - the next prune still runs
            logger.error("pruning the worker registry failed: %s", exc)
            return 0
        if deleted:
            logger.debug("pruned %d worker registry row(s)", deleted)
        return deleted

    def prune_history(self) -> int:
        """Delete the per-minute history older than ``HISTORY_KEEP_MS`` (by this worker's clock)."""
        if self.history is None or self.history_keep_ms is None:
            return 0
        before_ms = self.history.clock() - self.history_keep_ms
        deleted = 0
        try:
            while not self._stop.is_set():
                batch = self.store.prune_queue_minutes(before_ms) + self.store.prune_error_minutes(before_ms)
                deleted += batch
                if batch < 10_000:
                    break
        except Exception as exc:  # noqa: BLE001 - the next prune still runs
            logger.error("pruning the per-minute history failed: %s", exc)
        if deleted:
            logger.debug("pruned %d per-minute history row(s)", deleted)
        return deleted

    def advance_bulk(self) -> bool:
        """Move an open bulk operation one chunk on; True if there was one."""
        write_lock = self.history.write_lock if self.history is not None else None
        worker_id = self.application_name.removeprefix("cairnq_worker:")
        try:
            return bulk_operations.advance(self.store, worker_id=worker_id, write_lock=write_lock)
        except Exception as exc:  # noqa: BLE001 - the next poll tries again
            logger.error("advancing a bulk operation failed: %s", exc)
            return False

    def _sweep(self) -> None:
        try:
            # Its rests between batches end at once when the worker stops.
            deleted = sweep(self.store, rules=self.rules, should_stop=self._stop.is_set, sleep=self._stop.wait)
        except Exception as exc:  # noqa: BLE001 - the next sweep still runs
            logger.error("retention sweep failed: %s", exc)
            return
        if deleted:
            logger.info("retention sweep purged %d task(s)", deleted)

    def check_unserved(self) -> None:
        """Warn once per name about queued tasks in our queues that no handler here serves."""
        try:
            found = self.store.unserved_names(self.queues, self.names)
        except Exception as exc:  # noqa: BLE001 - the next check still runs
            logger.error("unserved-names check failed: %s", exc)
            return
        logger.debug("unserved-names check: %d queue/name pair(s) without a handler here", len(found))
        queues_of: dict[str, list[str]] = {}
        for queue, name in found:
            if name not in self.reported:
                queues_of.setdefault(name, []).append(queue)
        for name, queues in queues_of.items():
            self.reported.add(name)
            # A name registered here but left out by --task is usually a
            # deliberate split between deployments; say so.
            hint = (
                " (registered, but not in this worker's --task list)"
                if get_task(name) is not None
                else ""
            )
            logger.warning(
                "queued tasks named %r in %s %s: no worker in this process serves that name%s; "
                "they stay queued until a worker serving that name runs",
                name,
                "queue" if len(queues) == 1 else "queues",
                ", ".join(repr(queue) for queue in queues),
                hint,
            )
