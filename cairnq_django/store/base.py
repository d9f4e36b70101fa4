"""The store: every cairnq v1 operation, as one SQL statement per file per dialect.

``Store`` is the contract the public API, the worker and the admin build on.
``store.get_store()`` returns the right dialect for ``CAIRNQ["DATABASE"]``.
Rows cross this boundary as ``Task`` model instances (JSON columns decoded),
except where a method says otherwise.

Naming: each method maps to the protocol operation of the same name
(cairnq-protocol-v1.md section 3); a ``*_many`` method is the same operation
applied to many tasks in one statement, each task keeping its own outcome.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..protocol.limits import FleetLimits
from ..protocol.validation import CONFLICT_STRATEGIES as CONFLICT_STRATEGIES  # re-exported

if TYPE_CHECKING:
    from ..models import Task

T = TypeVar("T")


@dataclass(frozen=True)
class SubmitSpec:
    """One task to insert; already validated and JSON-encoded by the caller."""

    name: str
    payload_json: str
    queue: str = "default"
    key: str | None = None
    conflict: str = "reuse"
    priority: int = 0
    max_attempts: int = 3
    delay_ms: int = 0
    metadata_json: str = "{}"
    parent_id: str | None = None
    root_id: str | None = None
    correlation_id: str | None = None


@dataclass(frozen=True)
class Failure:
    """One task's failure, as handed to ``fail_many``."""

    task_id: str
    error: dict[str, Any]
    retryable: bool = True
    delay_ms: int = 0


@dataclass
class Draw:
    """The function a claim planner calls inside the claim transaction.

    ``draw(names, limit)`` takes up to ``limit`` claimable rows whose name is in
    ``names`` (``None`` = any name; ``[]`` = nothing) and returns them leased.
    ``draw([name], limit, fleet)`` also stays within the name's fleet limits
    and returns its rows in claim order, ``fleet.batch`` rows to a call.
    """

    run: Callable[[Sequence[str] | None, int, FleetLimits | None], list[Task]]
    rows: list[Task] = field(default_factory=list)

    def __call__(self, names: Sequence[str] | None, limit: int, fleet: FleetLimits | None = None) -> list[Task]:
        if limit <= 0 or (names is not None and len(names) == 0):
            return []
        taken = self.run(names, limit, fleet)
        self.rows.extend(taken)
        return taken


@dataclass(frozen=True)
class QueueOverview:
    """One queue as ``Store.queue_overview`` saw it."""

    queue: str
    queued: int
    running: int
    # How long the earliest-due queued task has been due (ms); None when none is due.
    due_age_ms: int | None
    paused: bool
    # Registered workers serving the queue, refreshed within three heartbeat intervals.
    live_workers: int = 0


@dataclass(frozen=True)
class WorkerRecord:
    """What a worker's beat writes to its registry row (``cairnq_django_worker``)."""

    worker_id: str
    host: str
    pid: int
    queues: Sequence[str]
    names: Sequence[str]
    concurrency: int
    resources: dict[str, int]
    global_resources: dict[str, int]
    version: str
    heartbeat_interval_ms: int
    # As of this beat: tasks in flight, attempts ended since start-up, and
    # attempts ended per minute over about the last minute.
    in_flight: int = 0
    succeeded: int = 0
    failed: int = 0
    per_minute: float = 0.0


@dataclass(frozen=True)
class ClaimProbe:
    """What the claimable probe saw: work due for the queues and names, an expired lease anywhere."""

    due: bool
    expired: bool

    @property
    def any(self) -> bool:
        """Return True when a claim session has something to do."""
        return self.due or self.expired


@dataclass(frozen=True)
class PurgeRule:
    """Which terminal rows a purge takes: finished more than ``older_than_ms`` ago, narrowed by filters."""

    older_than_ms: int
    status: str | None = None  # None: every terminal status
    queue: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class PurgedBatch:
    """What one purge batch deleted, and the latest completion time among those rows (None if none)."""

    ids: builtins.list[str]
    last_completed_ms: int | None


@dataclass(frozen=True)
class Recovered:
    """One expired lease a claim session recovered: the task and the status it left it in.

    ``queued``: put back for another attempt; ``failed``: out of attempts,
    with the lease-expired error; ``canceled``: a cancel had been requested.
    """

    task_id: str
    queue: str
    name: str
    status: str


@dataclass(frozen=True)
class ClaimHooks:
    """Seams a test injects into the claim session; the default has none.

    ``after_lock`` runs inside the claim transaction once its draws have
    locked rows. A session given one always runs as a transaction, never as
    the single autocommit statement, so there are locks for it to hold.
    """

    after_lock: Callable[[], None] | None = None


NO_HOOKS = ClaimHooks()


@dataclass(frozen=True)
class ClaimRequest:
    """What one claim session is asked to do; see ``Store.claim_session``.

    A worker builds its fast-path request once and reuses it for every poll.
    """

    queues: Sequence[str]
    worker_id: str
    lease_ms: int
    # The names the probe asks about; each draw of the plan names its own.
    names: Sequence[str] | None = None
    # True: probe here; a ClaimProbe the caller just ran; False: no probe.
    probe: ClaimProbe | bool = True
    # None: recover when the probe saw an expired lease (always without a probe).
    recover: bool | None = None
    single_draw: bool = False
    async_commit: bool = False
    reuse_plans: bool = False
    hooks: ClaimHooks = NO_HOOKS
    # Told, once the session has committed, which expired leases it recovered.
    on_recovered: Callable[[builtins.list[Recovered]], None] | None = None


class Store(abc.ABC):
    """The contract every caller builds on; ``sql_store.SQLStore`` implements it per dialect.

    All times are epoch milliseconds. Worker writes are conditioned on
    ownership (status running, this worker id, lease in the future); a single
    write that matches no row raises ``LostLease``.
    """

    dialect: str  # "sqlite" or "postgres"
    alias: str  # Django database alias

    # ---- client side -------------------------------------------------
    @abc.abstractmethod
    def submit(self, spec: SubmitSpec) -> Task:
        """Insert one task (keyed: the protocol's conflict strategies); return the row."""
        raise NotImplementedError

    @abc.abstractmethod
    def submit_many(self, specs: Iterable[SubmitSpec]) -> builtins.list[Task]:
        """Submit many tasks in one transaction, keyed ones keeping every rule.

        ``specs`` may be lazy and raise while it is read (the API checks each
        item as it goes). A store may start writing before it has read the
        last spec, so if reading raises it must write nothing.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def get(self, task_id: str) -> Task | None:
        raise NotImplementedError

    @abc.abstractmethod
    def get_by_key(self, key: str) -> Task | None:
        raise NotImplementedError

    @abc.abstractmethod
    def get_status(self, task_id: str) -> tuple[str, str] | None:
        """Return ``(id, status)`` or None: the cheap polling probe."""
        raise NotImplementedError

    @abc.abstractmethod
    def get_status_by_key(self, key: str) -> tuple[str, str] | None:
        raise NotImplementedError

    @abc.abstractmethod
    def list(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        root_id: str | None = None,
        correlation_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[Task]:
        raise NotImplementedError

    @abc.abstractmethod
    def stats(self, queue: str | None = None) -> dict[str, dict[str, int]]:
        raise NotImplementedError

    @abc.abstractmethod
    def terminal_counts(self, queues: Sequence[str], cap: int) -> dict[str, dict[str, int]]:
        """Each queue's succeeded, failed and canceled tasks, every count stopping at ``cap``.

        Read-only, through the claim index's (queue, status) ranges: at most
        ``cap`` index entries per queue and status, however many rows exist.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def queue_overview(self, *, max_queues: int = 1000, max_steps: int = 64) -> builtins.list[QueueOverview]:
        """Every queue with a task or a pause, by name: its live counts, due age and pause.

        One read-only statement through the claim index, never a scan of the
        terminal rows: one probe per distinct queue (at most ``max_queues``)
        and per distinct queued priority (at most ``max_steps`` per queue),
        plus counting each queue's queued and running rows.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def queue_depth(self, queue: str, max_depth: int) -> int:
        """Return headroom: ``max_depth`` minus queued rows, floored at 0."""
        raise NotImplementedError

    @abc.abstractmethod
    def cancel(self, task_id: str) -> Task | None:
        raise NotImplementedError

    @abc.abstractmethod
    def cancel_by_key(self, key: str) -> Task | None:
        raise NotImplementedError

    @abc.abstractmethod
    def cancel_many(self, task_ids: Sequence[str]) -> builtins.list[Task]:
        """Cancel every listed live task in one statement; return the changed rows."""
        raise NotImplementedError

    @abc.abstractmethod
    def retry(self, task_id: str, *, reset_attempt: bool = False) -> Task | None:
        raise NotImplementedError

    @abc.abstractmethod
    def retry_by_key(self, key: str, *, reset_attempt: bool = False) -> Task | None:
        raise NotImplementedError

    @abc.abstractmethod
    def retry_many(self, task_ids: Sequence[str], *, reset_attempt: bool = False) -> builtins.list[Task]:
        """Retry every listed failed/canceled task in one statement; return the changed rows."""
        raise NotImplementedError

    @abc.abstractmethod
    def purge(
        self,
        *,
        older_than_ms: int = 0,
        queue: str | None = None,
        status: str | None = None,
        name: str | None = None,
        limit: int = 1000,
    ) -> builtins.list[str]:
        raise NotImplementedError

    @abc.abstractmethod
    def purge_batch(self, rule: PurgeRule, *, limit: int, from_ms: int | None) -> PurgedBatch:
        """One batch of a sweep: ``purge`` of ``rule`` limited to rows completed at ``from_ms`` or later.

        A sweep passes the last batch's ``last_completed_ms``, so each batch's
        index range starts where the one before ended (``client.retention``).
        """
        raise NotImplementedError

    # ---- worker side -------------------------------------------------
    @abc.abstractmethod
    def run_with_connection(self, fn: Callable[[], T]) -> T:
        """Run ``fn``, which uses ``connections[self.alias]``, as a call of this store.

        A worker's stores that take turns on one connection (worker/connections.py)
        run it on that connection: the settler's write and a workflow's
        advancement share one transaction that way.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def now_ms(self) -> int:
        """Return the store's notion of now (database clock on PostgreSQL)."""
        raise NotImplementedError

    @abc.abstractmethod
    def has_claimable(self, queues: Sequence[str], names: Sequence[str] | None) -> bool:
        """Read-only probe: anything claimable now, or any expired lease anywhere."""
        raise NotImplementedError

    @abc.abstractmethod
    def probe_claim(
        self, queues: Sequence[str], names: Sequence[str] | None, *, leaseless: bool = True
    ) -> ClaimProbe:
        """Run the read-only probe (3.9 step 1): is work due, has any lease expired?

        ``leaseless`` also counts a running row with no lease (a foreign
        writer's) as expired. Finding none reads every running row, so a
        worker asks it once per lease period rather than on every probe.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def next_due(
        self, queues: Sequence[str], names: Sequence[str], *, max_steps: int = 64
    ) -> tuple[int, str] | None:
        """When the earliest not-yet-due queued task of ``queues``/``names`` is due, and its name.

        Returns ``(milliseconds from now, name)``, or None when no such task
        waits. Read-only; tasks already due are not counted (the claim takes
        those), so the milliseconds are at least 1.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def claim_session(self, request: ClaimRequest, plan: Callable[[Draw], object]) -> builtins.list[Task] | None:
        """Run one claim session (protocol 3.9).

        Probe first; if nothing is claimable return None without a transaction.
        Otherwise, in one short transaction: recover expired leases, then call
        ``plan(draw)``, which may call ``draw(names, limit)`` any number of
        times. Return every row drawn.

        ``request.probe`` is True to probe here, a ``ClaimProbe`` the caller
        just ran, or False to skip the probe (the caller knows work is there).
        Lease recovery runs when the probe saw an expired lease (otherwise it
        would change nothing), or, without a probe, unless ``recover`` is
        False (a worker that probed for expired leases moments ago).
        ``single_draw`` is the caller's promise that ``plan`` draws at most
        once; with no recovery to run, that draw is then one autocommit
        statement instead of a transaction. ``async_commit`` (workers,
        ``CAIRNQ["ASYNC_CLAIM_COMMIT"]``) lets the session's commit return
        before the database flushes it to disk. ``reuse_plans`` (workers, whose
        claim connection runs nothing else of theirs) lets PostgreSQL plan each
        claim statement once per connection. ``hooks`` are test seams.
        """
        raise NotImplementedError

    def claim(
        self,
        queues: Sequence[str],
        worker_id: str,
        *,
        lease_ms: int = 30_000,
        limit: int = 1,
        names: Sequence[str] | None = None,
    ) -> builtins.list[Task]:
        """The single-draw claim of the protocol (a session with one draw)."""
        request = ClaimRequest(queues, worker_id, lease_ms, names)
        rows = self.claim_session(request, lambda draw: draw(names, limit))
        return rows or []

    @abc.abstractmethod
    def get_payload(self, task_id: str) -> Any:
        """Read and decode one task's payload (one a claim left in the database).

        A payload Python cannot decode comes back as a ``payload.Undecodable``;
        ``LostLease`` if the row is gone.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def unserved_names(
        self,
        queues: Sequence[str],
        names: Sequence[str],
        *,
        max_names: int = 1000,
        limit: int = 100,
    ) -> builtins.list[tuple[str, str]]:
        """Return ``(queue, name)`` of queued tasks in ``queues`` whose name is not in ``names``.

        A claim filtered by ``names`` never takes such rows: the worker reports
        them. Read-only.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def prune_fleet_starts(self, keep_ms: dict[str, int], default_keep_ms: int, *, limit: int = 10_000) -> int:
        """Delete logged fleet starts that can no longer count; return how many went.

        A start row goes once its call is no longer running and it is older
        than its scope's longest rate window (``keep_ms[scope]``, else
        ``default_keep_ms``). At most ``limit`` rows per call.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def add_queue_minutes(self, rows: Sequence[dict[str, Any]]) -> None:
        """Add per-minute counts to ``cairnq_django_queue_minute`` in ONE upsert.

        Each row names ``queue`` and ``minute_ms`` and carries every count
        column of ``QueueMinute``; an existing (queue, minute) row gets them
        added, so every worker of the fleet adds to the same minute.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def prune_queue_minutes(self, before_ms: int, *, limit: int = 10_000) -> int:
        """Delete per-minute rows whose minute starts before ``before_ms`` (at most ``limit``); return how many."""
        raise NotImplementedError

    @abc.abstractmethod
    def add_error_minutes(self, rows: Sequence[dict[str, Any]]) -> None:
        """Add failed-attempt counts to ``cairnq_django_error_minute`` in ONE upsert.

        Each row names ``queue``, ``minute_ms``, ``name``, ``error_type`` and
        ``message`` and carries ``failed`` and ``retried``; an existing row
        gets them added, as ``add_queue_minutes`` does.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def prune_error_minutes(self, before_ms: int, *, limit: int = 10_000) -> int:
        """Delete error-count rows whose minute starts before ``before_ms`` (at most ``limit``); return how many."""
        raise NotImplementedError

    @abc.abstractmethod
    def recover_leases(self) -> int:
        """Recover expired leases outside a claim; return how many rows changed."""
        raise NotImplementedError

    @abc.abstractmethod
    def heartbeat(self, task_id: str, worker_id: str, lease_ms: int) -> Task:
        raise NotImplementedError

    @abc.abstractmethod
    def heartbeat_batch(
        self, task_ids: Sequence[str], worker_id: str, lease_ms: int
    ) -> dict[str, int | None]:
        """Renew owned tasks; return ``{id: cancel_requested_at_ms}`` of those renewed."""
        raise NotImplementedError

    @abc.abstractmethod
    def worker_beat(
        self, worker: WorkerRecord, task_ids: Sequence[str], lease_ms: int
    ) -> dict[str, int | None]:
        """Refresh the worker's registry row and renew its owned tasks, as one write.

        One statement on PostgreSQL, one transaction on SQLite; the row is
        inserted if missing. With no ``task_ids`` only the row is refreshed.
        Returns what ``heartbeat_batch`` returns.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def stop_worker(self, worker: WorkerRecord) -> bool:
        """Mark the worker's registry row stopped; False if it has no row."""
        raise NotImplementedError

    @abc.abstractmethod
    def prune_workers(self, keep_ms: int) -> int:
        """Delete the registry rows last seen more than ``keep_ms`` ago; return how many went."""
        raise NotImplementedError

    @abc.abstractmethod
    def worker_tasks(self, worker_id: str, *, limit: int = 100) -> builtins.list[Task]:
        """Return the running tasks leased by ``worker_id``, oldest first. Read-only."""
        raise NotImplementedError

    @abc.abstractmethod
    def progress(
        self, task_id: str, worker_id: str, progress: float | None, message: str | None
    ) -> Task:
        raise NotImplementedError

    @abc.abstractmethod
    def succeed(
        self, task_id: str, worker_id: str, result_json: str | None, message: str | None = None
    ) -> Task:
        raise NotImplementedError

    @abc.abstractmethod
    def complete(self, task_id: str, worker_id: str, result_json: str | None) -> Task:
        raise NotImplementedError

    @abc.abstractmethod
    def complete_many(
        self, worker_id: str, results: Sequence[tuple[str, str | None]]
    ) -> dict[str, str]:
        """Complete many owned tasks in one statement.

        ``results`` pairs a task id with its encoded result (or None). Returns
        ``{id: final status}`` for the rows written; an id missing from the
        answer lost its lease.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def fail(
        self,
        task_id: str,
        worker_id: str,
        error: dict[str, Any],
        *,
        retryable: bool = True,
        delay_ms: int = 0,
    ) -> Task:
        raise NotImplementedError

    @abc.abstractmethod
    def fail_many(self, worker_id: str, failures: Sequence[Failure]) -> dict[str, str]:
        """Fail many owned tasks in one statement, each with its own envelope,
        retryability and delay. Returns ``{id: final status}`` of rows written."""
        raise NotImplementedError

    @abc.abstractmethod
    def snooze_many(self, worker_id: str, snoozes: Sequence[tuple[str, int]]) -> dict[str, str]:
        """Snooze many owned tasks in one statement: each comes back in its own delay, not as an attempt.

        ``snoozes`` pairs a task id with its ``delay_ms`` (submit's range).
        Each row is handed back as ``release`` does (``attempt`` down by one;
        owner, lease, progress and message cleared) but due at now +
        ``delay_ms``. Cancel wins: a cancel-requested task ends ``canceled``.
        Returns ``{id: final status}`` of rows written; an id missing from the
        answer lost its lease.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def release(self, task_ids: Sequence[str], worker_id: str) -> builtins.list[str]:
        """Hand owned running tasks back to ``queued`` (drain deadline) in one statement.

        The handed-back attempt does not count: ``attempt`` goes down by one,
        ``run_at_ms`` = now, owner, lease, progress and message are cleared.
        Cancel wins: a cancel-requested task ends ``canceled`` instead.
        Returns the ids written (owned now); others are left alone."""
        raise NotImplementedError
