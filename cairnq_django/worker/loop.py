"""``Worker.run``: the claim loop (protocol 4.2).

Each turn of the loop waits for a free slot, asks the planner for one poll
(``worker/planner.py``: source order, probe, claim sessions, budgets), hands
what it drew to the executor, and sleeps when nothing was claimable. Errors
back off; stopping drains the calls in flight.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from django.core.exceptions import ImproperlyConfigured
from django.db import Error as DatabaseError
from django.db import connections

from ..conf import capacity_problem, get_config, listen_alias, undeclared_resources
from .. import signals
from ..protocol.ids import worker_id as new_worker_id
from ..models import Task
from ..tasks.registry import TaskDefinition, registered
from . import connections as _db
from ..protocol.envelopes import LEASE_EXPIRED_ERROR, LEASE_EXPIRED_RETRIED, no_handler_envelope, undecodable_envelope
from .attempt import Attempt, AttemptOwner
from .db_file import DatabaseFile
from .executor import HANDED_BACK, Call, Executor
from .heartbeat import Heartbeat, beat_interval_ms
from .options import WorkerOptions
from .pickup import pickup_ms
from .presence import Presence
from .budgets import Budgets, Source, build_sources, fleet_keep_ms
from .run_times import HAND_BACK_AFTER_MS, RunTimes
from .planner import ClaimPlanner
from ..protocol.backoff import Backoff
from ..store import get_store
from ..store.base import NO_HOOKS, ClaimHooks, Recovered
from ..tasks.periodic import Ticker
from .outcomes import NO_BACKOFF, Settlement, fail_settlement
from .settler import Settler
from .history import QueueHistory
from .housekeeping import Sweeper
from .wakeups import CommitWaker, PgWaker, Waker, past_poolers

if TYPE_CHECKING:
    from ..store.base import Store

logger = logging.getLogger("cairnq_django.worker")

# After a failed claim, wait before polling again (grows, capped, jittered).
CLAIM_ERROR_BACKOFF_S = 0.25
CLAIM_ERROR_BACKOFF_MAX_S = 5.0
# At shutdown, how long a call whose handler has returned may take to hand its
# outcome to the settler, and the least time the settler gets to write it.
HANDOFF_WAIT_S = 5.0
SETTLE_GRACE_S = 2.0
# After a notification (LISTEN) whose claim found nothing, how long further wake-ups are gathered
# into one claim (jittered ±50 %), doubled for each such wake-up in a row up to
# HERD_HOLD_OFF_MAX_S (and never past the poll interval), back to the first
# step once a claim gets rows. Every submit's NOTIFY wakes every listener and
# only one gets the task: 64 listeners each claiming 20 times a second filled
# a pooler's connections (docs/performance.md, "Scale-out"). A worker that keeps
# losing races claims about 5 times a second, and the fleet still picks a task
# up within a fraction of that, since their hold-offs end at different times.
HERD_HOLD_OFF_S = 0.05
HERD_HOLD_OFF_MAX_S = 0.2
# How often a PostgreSQL worker looks for workflow nodes whose task another
# SDK's worker, an operator or a purge ended (workflows/advance.py).
WORKFLOW_SWEEP_S = 1.0


def herd_hold_off_s(empty_wakes: int, poll_s: float) -> float:
    """How long to gather wake-ups after the ``empty_wakes``-th empty woken claim in a row (before jitter)."""
    return min(HERD_HOLD_OFF_S * 2 ** min(empty_wakes - 1, 16), HERD_HOLD_OFF_MAX_S, poll_s)


def herd_hold_s(empty_wakes: int, poll_s: float, due_in_s: float, jitter: float) -> float:
    """The hold-off after an empty claim that a notification woke: jittered, and never past the next due task.

    A notification of a delayed task also ends in an empty claim; holding off
    past its due time would start it that much late.
    """
    return max(0.0, min(jitter * herd_hold_off_s(empty_wakes, poll_s), due_in_s))


class Worker(AttemptOwner):
    """A claim loop with its heartbeat, settler, handler pool and wake-ups."""

    def __init__(
        self,
        options: WorkerOptions,
        *,
        store: Store | None = None,
        definitions: Sequence[TaskDefinition] | None = None,
        worker_id: str | None = None,
        hooks: ClaimHooks | None = None,
    ) -> None:
        if store is None:
            store = get_store()
        self.store = store
        self.options = options
        self.worker_id = worker_id or new_worker_id()
        self.application_name = f"cairnq_worker:{self.worker_id}"
        self.definitions = list(
            definitions if definitions is not None else registered().values()
        )
        self._check_resources()
        self.sources = build_sources(self.definitions, options.resources, options.global_resources)
        self.names = [definition.name for definition in self.definitions]
        self._largest_batch = max((source.batch for source in self.sources), default=1)
        unlimited = any(not source.restricted for source in self.sources)
        self.budgets = Budgets(
            concurrency=max(1, options.concurrency),
            resources=dict(options.resources),
            claim_batch=options.claim_batch,
            max_in_flight_bytes=options.max_in_flight_bytes,
            # A worker whose every source has a limit of its own never claims ahead.
            ahead=self._fixed_ahead(options.claim_ahead) if unlimited else 0,
        )
        # The automatic claim-ahead learns run times per name; a fixed one needs none.
        self.run_times = RunTimes() if options.claim_ahead == "auto" and unlimited else None
        if self.run_times is not None:
            run_times = self.run_times
            self.budgets.may_claim_ahead = lambda source: len(run_times.short_names(source.names)) == len(source.names)
        # Calls in flight of a name not (yet) seen to be short: nothing is claimed ahead behind them.
        self._long_calls: set[int] = set()
        # SQLite has one writer at a time; the worker's own writer threads take
        # turns in-process instead of sleeping in SQLite's busy handler.
        # Reentrant: the shared connection's turns take it too (connections.py).
        self.write_lock = threading.RLock() if store.dialect == "sqlite" else None
        # Settlement, heartbeat, housekeeping and the stop-time writes take
        # turns on one connection; the claim loop keeps its own.
        self.shared = _db.SharedConnection(
            store.alias, self.application_name, self.write_lock or threading.RLock()
        )
        shared_store = self.shared_store = cast("Store", _db.TakingTurns(store, self.shared))
        self.planner = ClaimPlanner(
            store,
            self.sources,
            self.budgets,
            queues=options.queues,
            names=self.names,
            worker_id=self.worker_id,
            lease_ms=options.lease_ms,
            poll_s=options.poll_interval_ms / 1000,
            async_commit=options.async_claim_commit,
            write_lock=self.write_lock,
            hooks=hooks or NO_HOOKS,
            on_recovered=self._recovered,
            short_names=self.run_times.short_names if self.run_times is not None else None,
        )
        self.inflight: dict[str, tuple[Attempt, Call]] = {}
        self._inflight_lock = threading.Lock()
        self._stop_requested = False
        self.db_file: DatabaseFile | None = None
        self._db_file_check_at = 0.0
        self.claimed = 0
        self.finished = 0
        # Attempts ended since start-up, as the registry row reports them:
        # succeeded, and failed (retried or not).
        self.succeeded = 0
        self.failed = 0
        self.db_executor = None
        self.waker: Waker = self._make_waker()
        # The settings every attempt reads through its owner (this worker).
        AttemptOwner.__init__(
            self,
            store,
            self.worker_id,
            options.lease_ms,
            retry_backoff_ms=options.retry_backoff_ms,
            retry_backoff_max_ms=options.retry_backoff_max_ms,
        )
        self.settler = Settler(
            shared_store,
            self.worker_id,
            application_name=self.application_name,
            lease_ms=options.lease_ms,
            on_settled=self._on_settled,
            on_lost=self._on_settle_lost,
            write_lock=self.write_lock,
            on_taken=self.budgets.nudge,
        )
        self.executor = Executor(
            concurrency=self.budgets.concurrency,
            alias=store.alias,
            application_name=self.application_name,
            max_run_ms=options.max_run_ms,
            retry_backoff_ms=options.retry_backoff_ms,
            retry_backoff_max_ms=options.retry_backoff_max_ms,
            settle=self.settler.put,
            on_end=self._on_call_end,
        )
        # Periodic schedules are ticked from the loop (rate-limited inside);
        # retention sweeps and the unserved-names check (F18) run on a
        # housekeeping thread of their own.
        self.ticker = Ticker(store, write_lock=self.write_lock)
        self.history = QueueHistory(shared_store, write_lock=self.write_lock)
        self.sweeper = Sweeper(
            shared_store,
            interval_ms=get_config()["RETENTION_INTERVAL_MS"],
            application_name=self.application_name,
            queues=options.queues,
            names=self.names,
            unserved_interval_ms=get_config()["UNSERVED_CHECK_INTERVAL_MS"],
            fleet_keep_ms=fleet_keep_ms(self.sources),
            worker_keep_ms=get_config()["WORKER_KEEP_MS"],
            history=self.history,
            history_keep_ms=get_config()["HISTORY_KEEP_MS"],
            # A node another SDK's worker ended is noticed within a second on
            # PostgreSQL and within one poll interval on SQLite.
            workflow_sweep_s=WORKFLOW_SWEEP_S if store.dialect == "postgres" else options.poll_interval_ms / 1000,
        )
        self.executor.on_fatal = self._fatal
        self.exit_code = 0
        interval_ms = beat_interval_ms(options.lease_ms, options.heartbeat_interval_ms)
        self.presence = Presence(
            self.worker_id,
            queues=options.queues,
            names=self.names,
            concurrency=self.budgets.concurrency,
            resources=dict(options.resources),
            global_resources=dict(options.global_resources),
            heartbeat_interval_ms=interval_ms,
            counters=self._counters,
        )
        self.heartbeat = Heartbeat(
            shared_store,
            self.worker_id,
            lease_ms=options.lease_ms,
            interval_ms=interval_ms,
            live=self._live_attempts,
            on_lost=Attempt.lose,
            application_name=self.application_name,
            write_lock=self.write_lock,
            presence=self.presence,
        )

    def _check_resources(self) -> None:
        for name, capacity in self.options.resources.items():
            if capacity_problem(capacity) is not None:
                raise ImproperlyConfigured(
                    f"resource {name!r} must have an integer capacity >= 1, got {capacity!r}"
                )
        for name, capacity in self.options.global_resources.items():
            if capacity_problem(capacity) is not None:
                raise ImproperlyConfigured(
                    f"global resource {name!r} must have an integer capacity >= 1, got {capacity!r}"
                )
        errors = undeclared_resources(self.options.resources, self.definitions, self.options.global_resources)
        if errors:
            raise ImproperlyConfigured("; ".join(errors))

    def _make_waker(self) -> Waker:
        if self.store.dialect == "postgres":
            listen = listen_alias({**get_config(), "DATABASE": self.store.alias})
            # Never over a transaction pooler, whatever the settings say (issue 35).
            listen = past_poolers(listen)
            if listen is None:
                return Waker(self.should_stop)  # a transaction pooler keeps no LISTEN: poll
            return PgWaker(
                self.should_stop,
                listen,
                self.options.queues,
                self.application_name,
            )
        name = str(connections[self.store.alias].settings_dict["NAME"])
        if name and name != ":memory:" and "mode=memory" not in name:
            return CommitWaker(self.should_stop, self.store.alias)
        return Waker(self.should_stop)

    # ---- control ---------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stop claiming and drain. Only sets a flag, so a signal handler may call it."""
        self._stop_requested = True

    stop = request_stop

    def _fatal(self, reason: str) -> None:
        # Drain and exit non-zero so a supervisor restarts a clean process.
        logger.error("worker must restart: %s; stopping with exit code 3", reason)
        self.exit_code = 3
        self._stop_requested = True

    def should_stop(self) -> bool:
        return self._stop_requested

    def banner(self) -> str:
        opts = self.options
        handlers = (
            ", ".join(
                repr(definition).removeprefix("<TaskDefinition ").removesuffix(">")
                for definition in self.definitions
            )
            or "(none registered)"
        )
        resources = (
            ", ".join(
                f"{name}={capacity}"
                for name, capacity in sorted(opts.resources.items())
            )
            or "none"
        )
        return (
            f"cairnq worker {self.worker_id} ({self.store.dialect}, database {self.store.alias!r})\n"
            f"  queues: {', '.join(opts.queues)}\n"
            f"  handlers: {handlers}\n"
            f"  resources: {resources}\n"
            f"  concurrency: {self.budgets.concurrency}"
            + (f" (+{self.budgets.ahead} claimed ahead)" if self.budgets.ahead else "")
            + (" (claims ahead tasks seen to run short)" if self.run_times is not None else "")
            + f", lease: {opts.lease_ms} ms, "
            f"max_run: {opts.max_run_ms or 'unbounded'}"
            + (" ms" if opts.max_run_ms else "")
            + f", poll: {opts.poll_interval_ms} ms\n"
            f"  wake-ups: {self.waker.describe(opts.poll_interval_ms)}\n"
            f"  connections: {_db.budget(self.store.dialect, isinstance(self.waker, PgWaker), self.budgets.concurrency)}"
        )

    # ---- AttemptOwner ----------------------------------------------------------------
    def _forget(self, attempt: Attempt) -> tuple[Attempt, Call] | None:
        """Drop ``attempt``'s in-flight entry -- only if it is still ``attempt``'s.

        A task settled as queued can be claimed again (by us) before its old
        run's bookkeeping ends; popping by id alone would drop the new run's
        entry and leave its lease without heartbeats.
        """
        task_id = attempt.task.id
        with self._inflight_lock:
            entry = self.inflight.get(task_id)
            if entry is None or entry[0] is not attempt:
                return None
            return self.inflight.pop(task_id)

    def lease_lost(self, attempt: Attempt) -> None:
        self._forget(attempt)
        task = attempt.task
        signals.task_lease_lost.send(
            sender=Task,
            task_id=task.id,
            name=task.name,
            queue=task.queue,
            attempt=task.attempt,
            worker_id=self.worker_id,
        )

    def settled(self, attempt: Attempt, status: str) -> None:
        entry = self._forget(attempt)
        self._finished([(attempt, status, entry[1] if entry else None)])

    def _forget_many(self, attempts: list[Attempt]) -> None:
        """``_forget`` of each of ``attempts``, under one take of the in-flight lock."""
        inflight = self.inflight
        with self._inflight_lock:
            for attempt in attempts:
                entry = inflight.get(attempt.task.id)
                if entry is not None and entry[0] is attempt:
                    del inflight[attempt.task.id]

    @staticmethod
    def _fixed_ahead(claim_ahead: int | str) -> int:
        return claim_ahead if isinstance(claim_ahead, int) else 0

    def _auto_ahead(self) -> int:
        """The automatic mode's allowance for the next claim: none while a call of a long name runs."""
        assert self.run_times is not None
        if self._long_calls:
            return 0
        short = self.run_times.short_names(tuple(self.names))
        return self.run_times.ahead(short, self.budgets.concurrency) if short else 0

    def _hand_back_if_stuck(self) -> None:
        """Release the calls waiting claimed-ahead once a call in flight runs past ``HAND_BACK_AFTER_MS``.

        Another worker, maybe idle, takes them; this one claims again when its slots free.
        """
        now = time.monotonic()
        with self._inflight_lock:
            calls = {id(call): call for _attempt, call in self.inflight.values()}.values()
        overrun = [
            call for call in calls if call.started and not call.ended and now - call.started > HAND_BACK_AFTER_MS / 1000
        ]
        waiting = [call for call in calls if not call.started]
        if not overrun or not waiting:
            return
        # Until they end, nothing is claimed ahead behind them (not even the tasks handed back now).
        self._long_calls.update(id(call) for call in overrun)
        self._hand_back(unstarted=True, why=f"a call ran past {HAND_BACK_AFTER_MS:.0f} ms")
        for call in waiting:
            if call.state == HANDED_BACK:
                for attempt in call.attempts:
                    self._forget(attempt)

    def _settlement_behind(self) -> bool:
        """Whether finished tasks pile up behind the settler's write in progress.

        A call's slot frees when its handler returns, before its settlement is
        written; without this bound a settler slower than the claims (a slow
        ``task_finished`` receiver, a long heartbeat on the shared connection)
        lets the held leases grow until the heartbeat cannot renew them in time.
        Two claims' worth of calls, or two of the largest batches, may wait.
        """
        budgets = self.budgets
        return self.settler.backlog >= 2 * max(budgets.concurrency + budgets.ahead, self._largest_batch)

    # ---- bookkeeping callbacks ------------------------------------------------------------
    def _live_attempts(self) -> list[Attempt]:
        with self._inflight_lock:
            return [entry[0] for entry in self.inflight.values()]

    def _counters(self) -> tuple[int, int, int]:
        with self._inflight_lock:
            in_flight = len(self.inflight)
        return in_flight, self.succeeded, self.failed

    def _on_call_end(self, call: Call) -> None:
        if self.run_times is not None and call.definition is not None:
            self._long_calls.discard(id(call))
            if call.started and call.ended:
                self.run_times.record(
                    call.name, (call.ended - call.started) * 1000, batch=bool(call.definition.batch)
                )
        if call.definition is not None:
            self.budgets.release(call.source, call.nbytes)
        # A freed slot or resource unit may make a claim worthwhile right away.
        self.waker.wake()

    def _on_settled(self, written: list[tuple[Settlement, str]]) -> None:
        """The settler wrote ``written`` (each with the status it left): the bookkeeping of all of them."""
        self._forget_many([item.attempt for item, _status in written])
        finished: list[tuple[Attempt, str, Call | None]] = []
        for item, status in written:
            if item.failure is not None and status in ("failed", "queued"):
                # The triage's counts: only a failure this worker wrote (a cancel that won shows as canceled).
                task = item.attempt.task
                self.history.errored(task.queue, task.name, item.failure.error, terminal=status == "failed")
            if item.snoozed and status == "queued":
                self._snoozed(item)
            else:
                # A cancel requested meanwhile ends even a snoozed task: finished.
                finished.append((item.attempt, status, item.call))
        if finished:
            self._finished(finished)

    def _snoozed(self, item: Settlement) -> None:
        self.finished += 1
        task = item.attempt.task
        duration = item.call.duration_ms if item.call is not None else None
        # A handler's own decision, as frequent as successes may be: logged with them (-v 2).
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "task snoozed: task=%s name=%s attempt=%s delay_ms=%s duration_ms=%s",
                task.id,
                task.name,
                task.attempt,
                item.snooze_ms,
                duration,
            )
        if not signals.task_snoozed.receivers:
            return
        signals.task_snoozed.send(
            sender=Task,
            task_id=task.id,
            name=task.name,
            queue=task.queue,
            attempt=task.attempt,
            worker_id=self.worker_id,
            delay_ms=item.snooze_ms,
            duration_ms=duration,
        )

    def _on_settle_lost(self, item: Settlement) -> None:
        if item.attempt.lost:
            self._forget(item.attempt)
        else:
            item.attempt.lose()

    def _recovered(self, leases: list[Recovered]) -> None:
        """Count the expired leases a claim recovered, as their dead workers never could.

        In the dashboard's history each is a retry, a failure or a cancel, and a
        retry or a failure counts its lease-expired error in the triage.
        """
        for lease in leases:
            self.history.settled(lease.queue, lease.status)
            if lease.status == "failed":
                self.history.errored(lease.queue, lease.name, LEASE_EXPIRED_ERROR, terminal=True)
            elif lease.status == "queued":
                self.history.errored(lease.queue, lease.name, LEASE_EXPIRED_RETRIED, terminal=False)

    def _finished(self, ended: list[tuple[Attempt, str, Call | None]]) -> None:
        """Count, log and announce attempts that ended, each with the status it left its task in."""
        counts: collections.Counter[tuple[str, str]] = collections.Counter()
        for attempt, status, _call in ended:
            counts[(attempt.task.queue, status)] += 1
        self.finished += len(ended)
        for (_queue, status), count in counts.items():
            if status == "succeeded":
                self.succeeded += count
            elif status in ("failed", "queued"):
                self.failed += count
        self.history.settled_many(counts)
        announce = bool(signals.task_finished.receivers)
        debug = logger.isEnabledFor(logging.DEBUG)
        for attempt, status, call in ended:
            # A success is logged at debug level and a signal only sent to receivers:
            # a drain of plain successes with neither does nothing more per task.
            if status == "succeeded" and not debug and not announce:
                continue
            self._report(attempt, status, call, announce)

    def _report(self, attempt: Attempt, status: str, call: Call | None, announce: bool) -> None:
        task = attempt.task
        duration = call.duration_ms if call is not None else None
        if status == "succeeded":
            logger.debug(
                "task succeeded: task=%s name=%s attempt=%s duration_ms=%s",
                task.id,
                task.name,
                task.attempt,
                duration,
            )
        elif status == "queued":
            logger.info(
                "task will retry: task=%s name=%s attempt=%s duration_ms=%s",
                task.id,
                task.name,
                task.attempt,
                duration,
            )
        elif status == "failed":
            logger.warning(
                "task failed: task=%s name=%s attempt=%s duration_ms=%s",
                task.id,
                task.name,
                task.attempt,
                duration,
            )
        else:
            logger.info(
                "task %s: task=%s name=%s attempt=%s duration_ms=%s",
                status,
                task.id,
                task.name,
                task.attempt,
                duration,
            )
        if not announce:
            return
        signals.task_finished.send(
            sender=Task,
            task_id=task.id,
            name=task.name,
            queue=task.queue,
            attempt=task.attempt,
            worker_id=self.worker_id,
            status=status,
            duration_ms=duration,
        )

    # ---- run -----------------------------------------------------------------------------
    def run(self) -> int:
        """Claim and run tasks until stopped (or ``burst``/``max_tasks`` ends it).

        Return 0, or 3 when too many abandoned handler threads are still
        running and the process should be restarted.
        """
        # Start-up checks already connected untagged; reconnect under the worker's name.
        _db.close_quietly(self.store.alias)
        _db.tag_thread(self.store.alias, self.application_name)
        self.db_file = DatabaseFile.of(self.store.alias)
        self.settler.start()
        self.heartbeat.start()
        self.executor.start(
            needs_async=any(definition.is_async for definition in self.definitions)
        )
        self.db_executor = self.executor.db_executor
        self.waker.start()
        self.sweeper.start()
        # One line: the command prints the whole banner on stdout already.
        opts = self.options
        logger.info(
            "worker started: %s (%s, queues: %s, concurrency: %d)",
            self.worker_id, self.store.dialect, ", ".join(opts.queues), self.budgets.concurrency,
        )
        logger.debug("worker configuration: %s", self.banner().replace("\n", ";"))
        try:
            self._loop()
        finally:
            self._shutdown()
        return self.exit_code

    def _loop(self) -> None:
        poll_s = self.options.poll_interval_ms / 1000
        errors = Backoff(CLAIM_ERROR_BACKOFF_S, CLAIM_ERROR_BACKOFF_MAX_S)
        max_tasks = self.options.max_tasks
        # Woken claims in a row that found nothing (see HERD_HOLD_OFF_S).
        empty_wakes = 0
        # Whether the last claim drew rows: a notification that came during it
        # may be for what it drew, so the next claim finding nothing is no lost race.
        drew_last = False
        while not self._stop_requested:
            # The worker's close_old_connections(): replace a connection an
            # error left unusable, but keep a healthy one across polls.
            _db.drop_if_broken(self.store.alias)
            if max_tasks is not None and self.claimed >= max_tasks:
                return
            if self._db_file_gone(poll_s):
                return
            self.ticker.maybe_tick()
            # Read the counter before the check: a release landing in between
            # must end the wait at once, not after the 0.1 s timeout.
            seen = self.budgets.releases
            if self.budgets.must_wait() or self._settlement_behind():
                if self.run_times is not None and self.budgets.calls > self.budgets.concurrency:
                    # Calls wait claimed ahead: watch that none waits behind a call running long.
                    self._hand_back_if_stuck()
                    self.budgets.wait_for_release(seen, HAND_BACK_AFTER_MS / 4000)
                    continue
                self.budgets.wait_for_release(seen, 0.1)
                continue
            if self.run_times is not None:
                self.budgets.ahead = self._auto_ahead()
            if not self.sources:
                if self.options.burst:
                    return
                self.waker.wait(poll_s)
                continue
            # A wake-up from LISTEN (work arrived in our queues) or a freed
            # slot: worth drawing at once, without asking the probe first.
            hinted = self.store.dialect == "postgres" and self.waker.event.is_set()
            notified = self.waker.notified
            self.waker.arm()
            seen_releases = self.budgets.releases
            # Burst ends only after an empty claim that started with nothing in
            # flight and nothing waiting to be written: a retry being settled
            # right now may make its task claimable again.
            quiet = (
                self.options.burst
                and self.budgets.calls == 0
                and not self.inflight
                and self.settler.idle
            )
            try:
                drawn = self.planner.poll(
                    hinted=hinted,
                    remaining=None if max_tasks is None else max_tasks - self.claimed,
                )
            except Exception as exc:
                _db.close_quietly(self.store.alias)
                if self._db_file_gone(0.0):
                    return
                delay = errors.next_delay()
                if errors.failures == 1:
                    if isinstance(exc, DatabaseError):
                        logger.error(
                            "claim failed (database unavailable?), retrying: %s", exc
                        )
                    else:
                        logger.exception("claim failed, retrying")
                else:
                    logger.debug("claim failed again (%d): %s", errors.failures, exc)
                # Re-arm first: the failed claim may have reopened the
                # connection, which must not count as a wake-up and cut the
                # backoff short.
                self.waker.arm()
                self.waker.wait(delay)
                continue
            if errors.reset():
                logger.info("database reachable again; claiming")
            if drawn:
                empty_wakes = 0
                drew_last = True
                self._dispatch(drawn)
                continue
            stale_notification, drew_last = drew_last, False
            if self.options.burst and self.budgets.calls == 0:
                if quiet:
                    return
                self.settler.wait_idle(self.options.lease_ms / 1000)
                continue
            # Nothing claimable: sleep until work arrives, a slot frees, the
            # next delayed task is due, or the poll ends. When the next task
            # is due is read now, right after the empty claim: read after the
            # hold-off below, a retry coming due meanwhile would no longer
            # count as "next" (it is due) and the wait would last the poll.
            idle_s = self.planner.idle_timeout(poll_s)
            if notified and not stale_notification:
                # Notified, but another worker took the task (every listener
                # is woken by each submit): wake-ups for a while then make one
                # claim, not one each, which bounds a fleet's empty claims. A
                # freed slot that finds nothing holds nothing off: no herd. Nor
                # does the first empty claim after one that drew rows: a workflow's
                # next step, released by this worker's own settlement, comes next.
                empty_wakes += 1
                held_from = time.monotonic()
                self.waker.hold_off(herd_hold_s(empty_wakes, poll_s, idle_s, random.uniform(0.5, 1.5)))
                idle_s -= time.monotonic() - held_from
            self.waker.wait(max(idle_s, 0.0), extra=self._released_since(seen_releases))

    def _db_file_gone(self, every_s: float) -> bool:
        """Stop (exit code 3) if the SQLite file was deleted or replaced; checked at most every ``every_s``."""
        if self.db_file is None:
            return False
        now = time.monotonic()
        if now < self._db_file_check_at:
            return False
        self._db_file_check_at = now + every_s
        change = self.db_file.change()
        if change is None:
            return False
        self._fatal(f"{change} while it ran")
        return True

    def _released_since(self, seen: int) -> Any:
        return lambda: self.budgets.releases != seen


    def _dispatch(
        self, drawn: list[tuple[Source, list[tuple[TaskDefinition | None, list[Task]]]]]
    ) -> None:
        measure = self.options.max_in_flight_bytes is not None
        debug = logger.isEnabledFor(logging.DEBUG)
        for source, calls in drawn:
            for definition, rows in calls:
                self.claimed += len(rows)
                attempts = self._fail_undecodable([Attempt(row, self) for row in rows], source)
                if not attempts:
                    continue
                # A payload the claim left in the database is charged the size
                # the claim reported; it is fetched only when the handler runs.
                nbytes = sum(attempt.payload_bytes() for attempt in attempts) if measure else 0
                call = Call(definition, source, attempts, nbytes)
                superseded = []
                with self._inflight_lock:
                    for attempt in attempts:
                        old = self.inflight.get(attempt.task.id)
                        if old is not None and not old[0].busy:
                            superseded.append(old[0])
                        self.inflight[attempt.task.id] = (attempt, call)
                for old_attempt in superseded:
                    # We claimed a task we still run: our lease was lost and the
                    # task redelivered to us (same worker id). Fence the old run
                    # locally, as the owner check cannot tell the two apart.
                    if old_attempt.mark_lost():
                        logger.warning(
                            "task=%s re-claimed while an earlier run of it is still in flight; "
                            "that run can no longer write",
                            old_attempt.task.id,
                        )
                if definition is None:
                    # Reachable only if a handler is unregistered mid-run: fail it
                    # permanently, without a heartbeat or a handler call.
                    logger.warning("no handler for claimed task name=%s", rows[0].name)
                    for attempt in attempts:
                        attempt.begin_settle()
                    envelope = no_handler_envelope(rows[0].name)
                    self.settler.put(
                        [fail_settlement(attempt, call, envelope, False, NO_BACKOFF) for attempt in attempts]
                    )
                    continue
                self.budgets.acquire(source, nbytes)
                if self.run_times is not None and definition is not None and not self.run_times.short(definition.name):
                    self._long_calls.add(id(call))
                started = bool(signals.task_started.receivers)
                pickups = [pickup_ms(attempt.task) for attempt in attempts]
                self.history.started(zip((attempt.task.queue for attempt in attempts), pickups))
                # Per-task logging and signals only when someone is listening.
                for attempt, pickup in zip(attempts, pickups) if (debug or started) else ():
                    task = attempt.task
                    if debug:
                        logger.debug(
                            "task claimed: task=%s name=%s attempt=%s",
                            task.id,
                            task.name,
                            task.attempt,
                        )
                    if started:
                        signals.task_started.send(
                            sender=Task,
                            task_id=task.id,
                            name=task.name,
                            queue=task.queue,
                            attempt=task.attempt,
                            worker_id=self.worker_id,
                            pickup_ms=pickup,
                        )
                self.executor.submit(call)

    def _fail_undecodable(self, attempts: list[Attempt], source: Source) -> list[Attempt]:
        """Fail the tasks whose payload or metadata cannot be decoded; return the others.

        Such a row (written by another SDK or raw SQL) never reaches a handler
        and takes no slot: it is settled as ``bad_payload`` through the
        settler's owner-checked writes, and the rest of its draw runs as usual.
        """
        bad = [
            (attempt, failure)
            for attempt in attempts
            if (failure := undecodable_envelope(attempt.task)) is not None
        ]
        if not bad:
            return attempts
        call = Call(None, source, [attempt for attempt, _ in bad], 0)
        call.started = call.ended = time.monotonic()
        settlements: list[Settlement] = []
        with self._inflight_lock:
            for attempt, _ in bad:
                self.inflight[attempt.task.id] = (attempt, call)
        for attempt, failure in bad:
            task = attempt.task
            logger.warning("task=%s name=%s not run: %s", task.id, task.name, failure["message"])
            attempt.begin_settle()
            settlements.append(fail_settlement(attempt, call, failure, False, NO_BACKOFF))
        self.settler.put(settlements)
        settled = {id(attempt) for attempt, _ in bad}
        return [attempt for attempt in attempts if id(attempt) not in settled]

    # ---- shutdown ----------------------------------------------------------------------------
    def _shutdown(self) -> None:
        deadline = time.monotonic() + max(0.0, self.options.drain_timeout)
        # Asked to stop, calls claimed ahead that no slot has taken yet go back
        # to the queue at once: the drain is for handlers that run. (At the
        # end of --burst or --max-tasks every call claimed still runs.)
        if self._stop_requested and self.budgets.ahead:
            self._hand_back(unstarted=True)
        if self.budgets.calls:
            logger.info(
                "stopping: draining %d call(s) for up to %.1f s",
                self.budgets.calls,
                self.options.drain_timeout,
            )
        # Wait for outcomes handed to the settler, not for freed slots: a slot
        # frees a moment before its call's settlement is queued.
        self.executor.wait_delivered(max(0.0, deadline - time.monotonic()))
        self._hand_back()
        # A handler that returned as the deadline passed was not taken back:
        # its settlement is being queued right now and must be written.
        self.executor.wait_delivered(HANDOFF_WAIT_S)
        self.settler.wait_idle(max(SETTLE_GRACE_S, deadline - time.monotonic()))
        self.settler.stop(timeout=2.0)
        self.sweeper.stop()
        # The last counts, settled during the drain: written before the connection closes.
        self.history.flush()
        self.heartbeat.stop()
        self.presence.stop(self.shared_store)
        self.waker.stop()
        self.executor.stop()
        self.shared.close()
        _db.close_quietly(self.store.alias)
        logger.info(
            "worker %s stopped: %d claimed, %d settled",
            self.worker_id,
            self.claimed,
            self.finished,
        )

    def _hand_back(self, *, unstarted: bool = False, why: str = "") -> None:
        """Release tasks whose handler still runs at the drain deadline, so another worker gets them now.

        Only calls the executor gives up (``take_back``) are released; a call
        whose handler returned or raised keeps its settlement, whatever stage
        that settlement is at. ``unstarted``: only the calls claimed ahead
        whose handler has not begun (at the start of a stop).
        """
        with self._inflight_lock:
            calls = {id(call): call for _attempt, call in self.inflight.values()}
        ids = []
        for call in calls.values():
            if call.definition is None or not self.executor.take_back(call, unstarted=unstarted):
                continue
            # The call never ends for the executor now: its slot is freed here.
            self.budgets.release(call.source, call.nbytes)
            for attempt in call.attempts:
                if not attempt.reserve():
                    continue
                # Refuse further writes from the still-running handler.
                attempt.mark_lost()
                ids.append(attempt.task.id)
        if not ids:
            return
        _db.drop_if_broken(self.store.alias)
        for tries in range(3):
            try:
                if self.write_lock is not None:
                    with self.write_lock:
                        released = self.store.release(ids, self.worker_id)
                else:
                    released = self.store.release(ids, self.worker_id)
                log = logger.info if unstarted else logger.warning
                log(
                    "%s: handed back %d of %d %s task(s): %s",
                    why or ("stopping" if unstarted else "drain timeout"),
                    len(released),
                    len(ids),
                    "claimed-ahead" if unstarted else "running",
                    ", ".join(ids[:10]) + ("..." if len(ids) > 10 else ""),
                )
                return
            except DatabaseError as exc:
                _db.close_quietly(self.store.alias)
                logger.error(
                    "could not hand back %d task(s) (attempt %d): %s",
                    len(ids),
                    tries + 1,
                    exc,
                )
                time.sleep(0.2 * (tries + 1))
