"""The dialect-independent SQL store: validation, the keyed-submit decision
table, statement execution and every operation but the claim.

The claim half is ``store/claim.py`` and row decoding ``store/rows.py``; each
dialect subclass only says how its statements want lists, booleans and "now"
bound (PostgreSQL takes time from the database, SQLite from the process) and
how contention is waited out. The SQL itself lives in ``store/<dialect>/sql/``.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from django.db import connections, transaction

from ..protocol import bounds, payload as _payload, validation
from ..exceptions import AlreadyExists, LostLease
from ..protocol.ids import task_id as new_task_id, task_ids as new_task_ids
from ..protocol.limits import FleetLimits
from ..models import LIVE_STATUSES, TERMINAL_STATUSES, Task, TaskStatus
from ..protocol.envelopes import LEASE_EXPIRED_ERROR, encode_error
from ..protocol.validation import check_spec as validate_spec
from . import claim
from .base import Failure, PurgedBatch, PurgeRule, QueueOverview, Recovered, Store, SubmitSpec, WorkerRecord
from .rows import decode_rows, defer_large_payloads, task_from_row
from .sql_files import statement

T = TypeVar("T")

STATUSES = tuple(TaskStatus.values)


# Result column names per (dialect, statement file), filled on first use.
_COLUMNS: dict[tuple[str, str], builtins.list[str]] = {}

# The columns of a freshly submitted task that no submit parameter sets.
_FRESH_ROW: dict[str, Any] = {
    "status": TaskStatus.QUEUED.value,
    "result": None,
    "error": None,
    "progress": None,
    "message": None,
    "attempt": 0,
    "worker_id": None,
    "lease_until_ms": None,
    "cancel_requested_at_ms": None,
    "completed_at_ms": None,
}

# Unkeyed rows per multi-row insert. The rows travel as one JSON parameter, so
# this bounds statement size and memory, not bound variables.
INSERT_CHUNK = 500




@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Hold off Python's cyclic garbage collector for a bulk write, then restore it.

    A bulk submit keeps every container it allocates (they are returned), so
    none can be cyclic garbage, yet the collector would walk them again and
    again as they pile up. It stays off if it was off already; the switch is
    process-wide, and other threads catch up with their first allocation after.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def batches(items: Iterable[T], size: int) -> Iterator[builtins.list[T]]:
    """Consecutive lists of up to ``size`` items (itertools.batched, Python 3.12)."""
    iterator = iter(items)
    while chunk := builtins.list(itertools.islice(iterator, size)):
        yield chunk


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


class SQLStore(Store):
    """Every operation of ``Store``, parameterised by a dialect's binding rules."""

    dialect = ""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    # ---- dialect hooks -------------------------------------------------
    def _list(self, values: Sequence[Any]) -> Any:
        """Bind a list parameter the way this dialect's statements expect."""
        raise NotImplementedError

    def _bool(self, value: bool) -> Any:
        raise NotImplementedError

    def _clock(self) -> dict[str, Any]:
        """Extra parameters carrying "now" (empty where the database has the clock)."""
        raise NotImplementedError

    def _run(self, operation: Callable[[], T]) -> T:
        """Run a whole operation, waiting out contention where the dialect needs it."""
        return operation()

    def _complete_many_params(self, items: builtins.list[tuple[str, str | None]]) -> dict[str, Any]:
        raise NotImplementedError

    def _commit_mode(self, relaxed: bool) -> dict[str, Any]:
        """Extra parameters of the statements that set how their own commit waits: claims, recovery, purge (PostgreSQL only)."""
        return {}

    def _reuse_claim_plans(self) -> None:
        """Let this connection keep one plan per claim statement (PostgreSQL only)."""

    def _probe(
        self, params: dict[str, Any], queues: Sequence[str], names: Sequence[str] | None
    ) -> builtins.list[dict[str, Any]]:
        """Run the claimable probe for ``queues`` and ``names``; its rows (``due`` and ``expired`` on each)."""
        return self._rows("claimable_probe", params)

    def _draw(
        self,
        statement: str,
        params: dict[str, Any],
        queues: Sequence[str],
        names: Sequence[str] | None,
        lease_ms: int,
        *,
        from_head: bool = False,
    ) -> builtins.list[Task]:
        """Run claim statement ``statement`` for ``queues`` and ``names``; the rows it leased."""
        return self._tasks(statement, params)

    def _in_transaction(self) -> bool:
        """Whether the calling thread is inside a transaction on the store's connection."""
        return connections[self.alias].in_atomic_block

    def _claim_scope(self, relaxed: bool) -> AbstractContextManager[object]:
        """What a claim session runs inside: how its commit waits (SQLite only)."""
        return contextlib.nullcontext()

    def _fail_many_params(self, items: builtins.list[tuple[str, str, bool, int]]) -> dict[str, Any]:
        raise NotImplementedError

    def _snooze_many_params(self, items: builtins.list[tuple[str, int]]) -> dict[str, Any]:
        raise NotImplementedError

    # ---- execution -----------------------------------------------------
    def _limited_rows(self, params: dict[str, Any], fleet: FleetLimits) -> builtins.list[dict[str, Any]]:
        """Run a fleet-limited draw (``claim.draw_limited``); raw rows in claim order."""
        raise NotImplementedError

    def _cursor(self, statement: str = "") -> Any:
        """A cursor on the store's connection to run shipped statement ``statement``."""
        return connections[self.alias].cursor()

    def _rows(self, name: str, params: dict[str, Any]) -> builtins.list[dict[str, Any]]:
        """Execute statement ``name``; return its rows as dicts (JSON not decoded)."""
        return self._fetch(name, statement(self.dialect, name), {**params, **self._clock()})

    def _fetch(self, name: str, sql: str, params: dict[str, Any]) -> builtins.list[dict[str, Any]]:
        """Execute ``sql`` (statement ``name``) with ``params`` as given; rows as dicts."""
        with self._cursor(name) as cursor:
            cursor.execute(sql, params)
            # A statement always answers with the same columns: read them
            # once per process (psycopg builds a Column object per column on
            # every description access, 24 for a task row).
            columns = _COLUMNS.get((self.dialect, name))
            if columns is None:
                description = cursor.description
                if description is None:
                    return []
                columns = _COLUMNS[(self.dialect, name)] = [col[0] for col in description]
            return [dict(zip(columns, row)) for row in cursor.fetchall()]

    def _values(self, name: str, params: dict[str, Any]) -> builtins.list[tuple[Any, ...]]:
        """Execute statement ``name``; return its rows as tuples in its RETURNING order."""
        with self._cursor(name) as cursor:
            cursor.execute(statement(self.dialect, name), {**params, **self._clock()})
            return cursor.fetchall()

    def _tasks(self, name: str, params: dict[str, Any]) -> builtins.list[Task]:
        alias = self.alias
        rows = decode_rows(defer_large_payloads(self._rows(name, params)))
        return [task_from_row(alias, row) for row in rows]

    def _task(self, name: str, params: dict[str, Any]) -> Task | None:
        rows = self._tasks(name, params)
        return rows[0] if rows else None

    def _owned(self, name: str, task_id: str, params: dict[str, Any]) -> Task:
        """Run an owned-now write; no row means the lease is lost."""
        row = self._run(lambda: self._task(name, {"id": task_id, **params}))
        if row is None:
            raise LostLease(task_id)
        return row

    def _atomic(self) -> transaction.Atomic:
        return transaction.atomic(using=self.alias)

    # ---- submit --------------------------------------------------------
    def _insert_params(self, spec: SubmitSpec, task_id: str) -> dict[str, Any]:
        return {
            "id": task_id,
            "name": spec.name,
            "queue": spec.queue,
            "payload": spec.payload_json,
            "metadata": spec.metadata_json,
            "max_attempts": spec.max_attempts,
            "priority": spec.priority,
            "delay_ms": spec.delay_ms,
            "parent_id": spec.parent_id,
            "root_id": spec.root_id or task_id,
            "correlation_id": spec.correlation_id,
        }

    def _insert_unkeyed(self, plain: Iterable[tuple[int, SubmitSpec]]) -> Iterator[tuple[int, Task]]:
        """Insert unkeyed (position, spec) pairs in chunks; yield (position, row) for each."""
        for chunk in batches(plain, INSERT_CHUNK):
            params = self._chunk_params(chunk)
            stamps = self._values("insert_tasks", self._insert_many_params(params))
            yield from zip((i for i, _ in chunk), self._inserted_tasks(params, stamps))

    def _chunk_params(
        self, chunk: builtins.list[tuple[int, SubmitSpec]]
    ) -> builtins.list[dict[str, Any]]:
        """Insert parameters of a chunk of (position, spec) pairs, with new ids made together."""
        return [self._insert_params(spec, i) for (_, spec), i in zip(chunk, new_task_ids(len(chunk)))]

    def _inserted_tasks(
        self, params: builtins.list[dict[str, Any]], stamps: builtins.list[tuple[Any, ...]]
    ) -> builtins.list[Task]:
        """Build the rows an insert wrote from its parameters and the stamps it returned.

        The insert returns only what the database chose, ``(id,
        created_at_ms, updated_at_ms, run_at_ms)``; every other column is a
        parameter or the value every fresh row has, so reading the whole row
        back would only cost time (a 23-column answer, and a JSON parse of
        each payload on the way back).
        """
        by_id = {stamp[0]: stamp for stamp in stamps}
        rows = []
        for values in params:
            _, created, updated, run_at = by_id[values["id"]]
            row = {**_FRESH_ROW, **values, "created_at_ms": created, "updated_at_ms": updated, "run_at_ms": run_at}
            del row["delay_ms"]
            rows.append(row)
        alias = self.alias
        tasks = [task_from_row(alias, row) for row in decode_rows(rows)]
        for task in tasks:
            task.cairnq_inserted = True  # type: ignore[attr-defined]
        return tasks

    def _insert(self, spec: SubmitSpec) -> Task:
        params = self._insert_params(spec, new_task_id())
        return self._inserted_tasks([params], self._values("insert_task", params))[0]

    def _insert_many_params(self, params: builtins.list[dict[str, Any]]) -> dict[str, Any]:
        """Bind many rows' insert parameters for ``insert_tasks`` (dialect hook)."""
        raise NotImplementedError

    def _submit_keyed(self, spec: SubmitSpec) -> Task:
        """The keyed decision table of protocol 3.1; caller holds a transaction."""
        key = spec.key
        self._rows("lock_key", {"key": key})
        current = self._task("get_by_key", {"key": key})
        if current is not None:
            if spec.conflict == "reject":
                raise AlreadyExists(key)  # type: ignore[arg-type]
            if current.status in LIVE_STATUSES:
                if spec.conflict in ("reuse", "reuse-succeeded"):
                    current.cairnq_inserted = False  # type: ignore[attr-defined]
                    return current
                self._task("cancel", {"id": current.id})  # replace: the ordinary cancel
            elif current.status == TaskStatus.SUCCEEDED and spec.conflict == "reuse-succeeded":
                current.cairnq_inserted = False  # type: ignore[attr-defined]
                return current
        created = self._insert(spec)
        self._rows("upsert_key", {"key": key, "task_id": created.id})
        return created

    def submit(self, spec: SubmitSpec) -> Task:
        validate_spec(spec)
        if spec.key is None:
            return self._run(lambda: self._insert(spec))

        def keyed() -> Task:
            with self._atomic():
                return self._submit_keyed(spec)

        return self._run(keyed)

    def _streams_submits(self) -> bool:
        """Whether ``submit_many`` may write while it still reads its specs.

        Only where an operation is never run twice: a store that retries a
        contended write (SQLite) reads and checks every spec first, so the
        retry starts from the same list.
        """
        return False

    def submit_many(self, specs: Iterable[SubmitSpec]) -> builtins.list[Task]:
        if self._streams_submits():
            stream = iter(specs)
            first = next(stream, None)
            if first is None:
                return []
            specs = itertools.chain([first], stream)
        else:
            specs = builtins.list(specs)  # a retry starts again from the same specs
            if not specs:
                return []
        return self._run(lambda: self._write_many(specs))

    def _write_many(self, specs: Iterable[SubmitSpec]) -> builtins.list[Task]:
        """Insert every spec in one transaction; rows in input order.

        Unkeyed specs go to ``_insert_unkeyed`` as they are read, each
        validated first; keyed ones are set aside and submitted afterwards,
        one at a time.
        """
        out: builtins.list[Task | None] = []
        keyed: builtins.list[tuple[int, SubmitSpec]] = []

        def unkeyed() -> Iterator[tuple[int, SubmitSpec]]:
            for position, spec in enumerate(specs):
                validate_spec(spec)
                out.append(None)
                if spec.key is None:
                    yield position, spec
                else:
                    keyed.append((position, spec))

        with self._atomic():
            for position, task in self._insert_unkeyed(unkeyed()):
                out[position] = task
            # Keys in sorted order so two concurrent batches take the PG key
            # locks in the same order (no deadlock); a stable sort keeps
            # repeated keys in submit order, so the later one sees the earlier.
            keyed.sort(key=lambda pair: pair[1].key or "")
            for position, spec in keyed:
                out[position] = self._submit_keyed(spec)
        return [task for task in out if task is not None]

    # ---- reads ---------------------------------------------------------
    def get(self, task_id: str) -> Task | None:
        return self._task("get", {"id": task_id})

    def get_by_key(self, key: str) -> Task | None:
        return self._task("get_by_key", {"key": key})

    def get_status(self, task_id: str) -> tuple[str, str] | None:
        rows = self._rows("get_status", {"id": task_id})
        return (rows[0]["id"], rows[0]["status"]) if rows else None

    def get_status_by_key(self, key: str) -> tuple[str, str] | None:
        rows = self._rows("get_status_by_key", {"key": key})
        return (rows[0]["id"], rows[0]["status"]) if rows else None

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
        validation.check_list_args(status, limit, offset)
        return self._tasks(
            "list",
            {
                "status": status,
                "queue": queue,
                "name": name,
                "root_id": root_id,
                "correlation_id": correlation_id,
                "limit": limit,
                "offset": offset,
            },
        )

    def stats(self, queue: str | None = None) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        if queue is not None:
            out[queue] = dict.fromkeys(STATUSES, 0)
        for row in self._rows("stats", {"queue": queue}):
            counts = out.setdefault(row["queue"], dict.fromkeys(STATUSES, 0))
            counts[row["status"]] = int(row["n"])
        return out

    def terminal_counts(self, queues: Sequence[str], cap: int) -> dict[str, dict[str, int]]:
        cap = bounds.LIST_LIMIT.check(cap, "cap")
        out: dict[str, dict[str, int]] = {queue: {} for queue in queues}
        if not out:
            return out
        for row in self._rows("terminal_counts", {"queues": self._list(list(out)), "cap": cap}):
            out[str(row["queue"])] = {status: int(row[status]) for status in TERMINAL_STATUSES}
        return out

    def queue_overview(self, *, max_queues: int = 1000, max_steps: int = 64) -> builtins.list[QueueOverview]:
        rows = self._rows("queue_overview", {"max_queues": max_queues, "max_steps": max_steps})
        return [
            QueueOverview(
                queue=str(row["queue"]),
                queued=int(row["queued"]),
                running=int(row["running"]),
                due_age_ms=None if row["due_age_ms"] is None else max(0, int(row["due_age_ms"])),
                paused=bool(row["paused"]),
                live_workers=int(row["live_workers"]),
            )
            for row in rows
        ]

    def queue_depth(self, queue: str, max_depth: int) -> int:
        validation.check_max_depth(max_depth)
        rows = self._rows("queue_depth", {"queue": queue, "max_depth": max_depth})
        return max(0, int(rows[0]["headroom"]))

    # ---- cancel / retry ------------------------------------------------
    def cancel(self, task_id: str) -> Task | None:
        return self._run(lambda: self._task("cancel", {"id": task_id}))

    def _by_key(self, key: str, statement: str, params: dict[str, Any]) -> Task | None:
        def operation() -> Task | None:
            with self._atomic():
                self._rows("lock_key", {"key": key})
                rows = self._rows("get_status_by_key", {"key": key})
                if not rows:
                    return None
                return self._task(statement, {"id": rows[0]["id"], **params})

        return self._run(operation)

    def cancel_by_key(self, key: str) -> Task | None:
        return self._by_key(key, "cancel", {})

    def cancel_many(self, task_ids: Sequence[str]) -> builtins.list[Task]:
        ids = _unique(task_ids)
        if not ids:
            return []
        return self._run(lambda: self._tasks("cancel_many", {"ids": self._list(ids)}))

    def retry(self, task_id: str, *, reset_attempt: bool = False) -> Task | None:
        params = {"id": task_id, "reset_attempt": self._bool(reset_attempt)}
        return self._run(lambda: self._task("retry", params))

    def retry_by_key(self, key: str, *, reset_attempt: bool = False) -> Task | None:
        return self._by_key(key, "retry", {"reset_attempt": self._bool(reset_attempt)})

    def retry_many(self, task_ids: Sequence[str], *, reset_attempt: bool = False) -> builtins.list[Task]:
        ids = _unique(task_ids)
        if not ids:
            return []
        params = {"ids": self._list(ids), "reset_attempt": self._bool(reset_attempt)}
        return self._run(lambda: self._tasks("retry_many", params))

    def purge(
        self,
        *,
        older_than_ms: int = 0,
        queue: str | None = None,
        status: str | None = None,
        name: str | None = None,
        limit: int = 1000,
    ) -> builtins.list[str]:
        rule = PurgeRule(older_than_ms, status=status, queue=queue, name=name)
        return self.purge_batch(rule, limit=limit, from_ms=None).ids

    def purge_batch(self, rule: PurgeRule, *, limit: int, from_ms: int | None) -> PurgedBatch:
        validation.check_purge_args(rule.older_than_ms, limit, rule.status)
        params = {
            "older_than_ms": rule.older_than_ms,
            "queue": rule.queue,
            "status": rule.status,
            "name": rule.name,
            "limit": limit,
            "from_ms": from_ms,
            # Relaxed as a claim's is (purge.sql says why), never inside the caller's transaction.
            **self._commit_mode(not self._in_transaction()),
        }
        rows = self._run(lambda: self._rows("purge", params))
        completed = [row["completed_at_ms"] for row in rows]
        return PurgedBatch(ids=[row["id"] for row in rows], last_completed_ms=max(completed) if completed else None)

    # ---- claim ---------------------------------------------------------
    def run_with_connection(self, fn: Callable[[], T]) -> T:
        return fn()

    def now_ms(self) -> int:
        return int(self._rows("now_ms", {})[0]["now_ms"])

    def has_claimable(self, queues: Sequence[str], names: Sequence[str] | None) -> bool:
        return self.probe_claim(queues, names).any

    def _recover(self, relaxed: bool = False) -> builtins.list[Recovered]:
        params = {"lease_expired_error": _payload.encode(LEASE_EXPIRED_ERROR), **self._commit_mode(relaxed)}
        return [
            Recovered(task_id=row["id"], queue=row["queue"], name=row["name"], status=row["status"])
            for row in self._rows("recover_leases", params)
        ]

    def recover_leases(self) -> int:
        return len(self._run(self._recover))

    def get_payload(self, task_id: str) -> Any:
        """Read and decode one task's payload (one a claim left in the database).

        A payload Python cannot decode comes back as a ``payload.Undecodable``.

        The text is read first and the driver's copies are gone before it is
        decoded, so a large payload is in memory twice at most (text and
        object). ``LostLease`` if the row is gone.
        """
        text = self._payload_text(task_id)
        if text is None:
            raise LostLease(task_id)
        # Undecodable text comes back as its marker, for the worker to fail alone.
        return _payload.decode_stored(text)

    def _payload_text(self, task_id: str) -> str | None:
        """Return a task's payload as JSON text, None if the row is gone.

        Returning closes the cursor, which frees the driver's copy of the text.
        """
        with self._cursor("get_payload") as cursor:
            cursor.execute(statement(self.dialect, "get_payload"), {"id": task_id})
            row = cursor.fetchone()
        return None if row is None else str(row[0])

    # The claim half (probe, session, draws, next due time): store/claim.py.
    probe_claim = claim.probe_claim
    claim_session = claim.claim_session
    next_due = claim.next_due

    # ---- worker writes -------------------------------------------------
    def heartbeat(self, task_id: str, worker_id: str, lease_ms: int) -> Task:
        return self._owned("heartbeat", task_id, {"worker_id": worker_id, "lease_ms": lease_ms})

    def heartbeat_batch(
        self, task_ids: Sequence[str], worker_id: str, lease_ms: int
    ) -> dict[str, int | None]:
        ids = _unique(task_ids)
        if not ids:
            return {}
        params = {"ids": self._list(ids), "worker_id": worker_id, "lease_ms": lease_ms}
        rows = self._run(lambda: self._rows("heartbeat_batch", params))
        return {row["id"]: row["cancel_requested_at_ms"] for row in rows}

    # ---- the worker registry -------------------------------------------
    def _worker_params(self, worker: WorkerRecord) -> dict[str, Any]:
        return {
            "worker_id": worker.worker_id,
            "host": worker.host,
            "pid": worker.pid,
            "queues": json.dumps(builtins.list(worker.queues), ensure_ascii=False),
            "names": json.dumps(builtins.list(worker.names), ensure_ascii=False),
            "concurrency": worker.concurrency,
            "resources": json.dumps(worker.resources, ensure_ascii=False, sort_keys=True),
            "global_resources": json.dumps(worker.global_resources, ensure_ascii=False, sort_keys=True),
            "version": worker.version,
            "interval_ms": worker.heartbeat_interval_ms,
            "in_flight": worker.in_flight,
            "succeeded": worker.succeeded,
            "failed": worker.failed,
            "per_minute": float(worker.per_minute),
        }

    def _beat_rows(self, params: dict[str, Any]) -> builtins.list[dict[str, Any]]:
        """Run one beat: the registry refresh and the lease renewal (dialect hook)."""
        return self._rows("worker_beat", params)

    def worker_beat(
        self, worker: WorkerRecord, task_ids: Sequence[str], lease_ms: int
    ) -> dict[str, int | None]:
        params = {**self._worker_params(worker), "ids": self._list(_unique(task_ids)), "lease_ms": lease_ms}
        rows = self._run(lambda: self._beat_rows(params))
        return {row["id"]: row["cancel_requested_at_ms"] for row in rows}

    def stop_worker(self, worker: WorkerRecord) -> bool:
        params = {"worker_id": worker.worker_id, "succeeded": worker.succeeded, "failed": worker.failed}
        # stop_worker.sql zeroes the in-flight count and the rate: a stopped worker runs nothing.
        return bool(self._run(lambda: self._rows("stop_worker", params)))

    def prune_workers(self, keep_ms: int) -> int:
        keep = bounds.KEEP_MS.check(keep_ms, "keep_ms")
        return len(self._run(lambda: self._rows("prune_workers", {"keep_ms": keep})))

    def worker_tasks(self, worker_id: str, *, limit: int = 100) -> builtins.list[Task]:
        return self._tasks("worker_tasks", {"worker_id": worker_id, "limit": bounds.LIST_LIMIT.check(limit, "limit")})

    def progress(
        self, task_id: str, worker_id: str, progress: float | None, message: str | None
    ) -> Task:
        params = {
            "worker_id": worker_id,
            "progress": None if progress is None else float(progress),
            "message": message,
        }
        return self._owned("progress", task_id, params)

    def succeed(
        self, task_id: str, worker_id: str, result_json: str | None, message: str | None = None
    ) -> Task:
        params = {"worker_id": worker_id, "result": result_json, "message": message}
        return self._owned("succeed", task_id, params)

    def complete(self, task_id: str, worker_id: str, result_json: str | None) -> Task:
        return self._owned("complete", task_id, {"worker_id": worker_id, "result": result_json})

    def complete_many(
        self, worker_id: str, results: Sequence[tuple[str, str | None]]
    ) -> dict[str, str]:
        # One entry per id (the last wins), so each row is written exactly once.
        items = list(dict(results).items())
        if not items:
            return {}
        params = {"worker_id": worker_id, **self._complete_many_params(items)}
        rows = self._run(lambda: self._rows("complete_many", params))
        return {row["id"]: row["status"] for row in rows}

    def fail(
        self,
        task_id: str,
        worker_id: str,
        error: dict[str, Any],
        *,
        retryable: bool = True,
        delay_ms: int = 0,
    ) -> Task:
        if not isinstance(delay_ms, int) or delay_ms < 0:
            raise ValueError(f"delay_ms must be an integer >= 0, not {delay_ms!r}")
        params = {
            "worker_id": worker_id,
            "error": encode_error(error, retryable),
            "retryable": self._bool(retryable),
            "delay_ms": delay_ms,
        }
        return self._owned("fail", task_id, params)

    def fail_many(self, worker_id: str, failures: Sequence[Failure]) -> dict[str, str]:
        latest: dict[str, Failure] = {}
        for failure in failures:
            if not isinstance(failure.delay_ms, int) or failure.delay_ms < 0:
                raise ValueError(f"delay_ms must be an integer >= 0, not {failure.delay_ms!r}")
            latest[failure.task_id] = failure
        if not latest:
            return {}
        items = [
            (f.task_id, encode_error(f.error, f.retryable), bool(f.retryable), f.delay_ms)
            for f in latest.values()
        ]
        params = {"worker_id": worker_id, **self._fail_many_params(items)}
        rows = self._run(lambda: self._rows("fail_many", params))
        return {row["id"]: row["status"] for row in rows}

    def snooze_many(self, worker_id: str, snoozes: Sequence[tuple[str, int]]) -> dict[str, str]:
        # One entry per id (the last wins), so each row is written exactly once.
        latest: dict[str, int] = {}
        for task_id, delay_ms in snoozes:
            latest[task_id] = bounds.DELAY_MS.check(delay_ms, "delay_ms")
        if not latest:
            return {}
        params = {"worker_id": worker_id, **self._snooze_many_params(list(latest.items()))}
        rows = self._run(lambda: self._rows("snooze_many", params))
        return {row["id"]: row["status"] for row in rows}

    def release(self, task_ids: Sequence[str], worker_id: str) -> builtins.list[str]:
        ids = _unique(task_ids)
        if not ids:
            return []
        params = {"ids": self._list(ids), "worker_id": worker_id}
        return self._run(lambda: [row["id"] for row in self._rows("release", params)])

    # ---- housekeeping --------------------------------------------------
    def prune_fleet_starts(self, keep_ms: dict[str, int], default_keep_ms: int, *, limit: int = 10_000) -> int:
        params = {"keep": json.dumps(keep_ms), "default_keep_ms": default_keep_ms, "limit": limit}
        return len(self._run(lambda: self._rows("prune_fleet_starts", params)))

    def add_queue_minutes(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self._run(lambda: self._rows("add_queue_minutes", {"items": json.dumps(list(rows))}))

    def prune_queue_minutes(self, before_ms: int, *, limit: int = 10_000) -> int:
        params = {"before_ms": before_ms, "limit": limit}
        return len(self._run(lambda: self._rows("prune_queue_minutes", params)))

    def add_error_minutes(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self._run(lambda: self._rows("add_error_minutes", {"items": json.dumps(list(rows))}))

    def prune_error_minutes(self, before_ms: int, *, limit: int = 10_000) -> int:
        params = {"before_ms": before_ms, "limit": limit}
        return len(self._run(lambda: self._rows("prune_error_minutes", params)))

    def unserved_names(
        self,
        queues: Sequence[str],
        names: Sequence[str],
        *,
        max_names: int = 1000,
        limit: int = 100,
    ) -> builtins.list[tuple[str, str]]:
        """Return ``(queue, name)`` of queued tasks in ``queues`` whose name is not in ``names``.

        A claim filtered by ``names`` never takes such rows (fault plan F18 b):
        the worker reports them. Read-only; each queue's distinct queued names
        are walked through the claim-by-name index, at most ``max_names`` of them.
        """
        wanted = _unique(queues)
        if not wanted:
            return []
        params = {
            "queues": self._list(wanted),
            "names": self._list(_unique(names)),
            "max_names": max_names,
            "limit": limit,
        }
        return [(row["queue"], row["name"]) for row in self._rows("unserved_names", params)]
