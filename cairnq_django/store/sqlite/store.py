"""The SQLite store: the process supplies "now" (protocol 2.1).

Lists bind as JSON array text expanded with ``json_each`` (one variable,
whatever the length), booleans as 0/1. SQLite has a single writer, so a whole
operation that meets "database is locked" is retried with jittered backoff
within ``CAIRNQ["SQLITE_BUSY_TIMEOUT_MS"]`` -- but only when it owns its
transaction: inside a caller's ``atomic()`` block the caller's earlier work
would be lost by a retry, so the error is theirs to handle. A write that
finds the disk full ("database or disk is full") is never retried here: it
raises ``DatabaseFull``, naming the file.

Large-row mode. SQLite answers an ``UPDATE ... RETURNING`` by holding three
copies of each row it changes (the old row, the new row, the record it
writes), where a plain ``UPDATE`` holds two: with a 50 MB payload that third
copy is 50 MB of the worker's peak. When ``CAIRNQ["MAX_PAYLOAD_BYTES"]``
admits payloads over ``LARGE_ROW_BYTES`` (or is None), the worker's writes
(claims, settlement, snoozes, lease renewal, progress, hand-back) run as pick / write /
read statements (``large_rows.py``) in one IMMEDIATE transaction
instead: the same rows, the same answer, one or two statements more, and no
RETURNING. Deployments at the default limit keep the single statements.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import lru_cache
from typing import Any, TypeVar

from django.db import OperationalError, connections, transaction

from ...conf import get_config
from ...exceptions import DatabaseFull
from ...protocol.backoff import capped_doubling, equal_jitter
from ...protocol.limits import FleetLimits
from ..sql_files import statement
from ..sql_store import SQLStore
from .large_rows import step_sql
from .durability import relaxed_commits

T = TypeVar("T")

_BUSY_MESSAGES = ("database is locked", "database is busy", "database table is locked")
# A locked database is retried after 1 ms doubling to 50 ms, with equal jitter.
_FIRST_BACKOFF_S = 0.001
_MAX_BACKOFF_S = 0.05

# Above this payload limit the worker's writes avoid RETURNING (see above).
LARGE_ROW_BYTES = 8 << 20

# Statement -> (pick, write, read) in large-row mode. The pick's rows are the
# answer when there is no read (the write changes none of their columns).
_LARGE_ROW_STEPS: dict[str, tuple[str, str, str | None]] = {
    "claim": ("claim_pick", "claim_write", "tasks_read"),
    "claim_one_name": ("claim_one_name_pick", "claim_write", "tasks_read"),
    "claim_one_queue": ("claim_one_queue_pick", "claim_write", "tasks_read"),
    "claim_one_queue_one_name": ("claim_one_queue_one_name_pick", "claim_write", "tasks_read"),
    "complete_many": ("settle_pick", "complete_many_write", "settled_read"),
    "fail_many": ("settle_pick", "fail_many_write", "settled_read"),
    "snooze_many": ("settle_pick", "snooze_many_write", "settled_read"),
    "heartbeat_batch": ("owned_pick", "heartbeat_batch_write", None),
    "release": ("owned_pick", "release_write", None),
    "heartbeat": ("owned_one_pick", "heartbeat_write", "tasks_read"),
    "progress": ("owned_one_pick", "progress_write", "tasks_read"),
    "complete": ("owned_one_pick", "complete_write", "tasks_read"),
    "succeed": ("owned_one_pick", "succeed_write", "tasks_read"),
    "fail": ("owned_one_pick", "fail_write", "tasks_read"),
}


def _is_busy(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(message in text for message in _BUSY_MESSAGES)


def _is_full(exc: OperationalError) -> bool:
    # Django chains the driver's error, which carries SQLite's result code.
    code = getattr(exc.__cause__, "sqlite_errorcode", None)
    return code == sqlite3.SQLITE_FULL or "database or disk is full" in str(exc).lower()


def _large_rows() -> bool:
    limit = get_config()["MAX_PAYLOAD_BYTES"]
    return limit is None or int(limit) > LARGE_ROW_BYTES


def _now_ms() -> int:
    return int(time.time() * 1000)


@lru_cache(maxsize=None)
def leasing_claim(pick: str) -> str:
    """A fleet-limited pick (``claim_limited``, ``claim_limited_keyed``) as one statement that leases what it picks.

    The pick's CTEs stay as they are, its final SELECT becomes one more CTE,
    and claim_picked.sql's UPDATE ... RETURNING leases those ids: one
    statement instead of a pick and a write. Rows come back in no set order.
    """
    lines = statement("sqlite", pick).splitlines()
    final = max(i for i, line in enumerate(lines) if line.startswith("SELECT "))
    title, ctes, selection = lines[0], lines[1:final], lines[final:]
    ctes[-1] = ctes[-1] + ","  # the last CTE's closing parenthesis
    update = statement("sqlite", "claim_picked").splitlines()[1:]
    target = "WHERE id IN (SELECT value FROM json_each(%(picked)s))"
    if target not in update:
        raise ValueError("claim_picked.sql must lease the ids in %(picked)s")
    update[update.index(target)] = "WHERE id IN (SELECT id FROM picked)"
    if pick == "claim_limited_keyed":
        # The key each start is logged under, read as the pick read it.
        update[-1] += ",\n    coalesce(json_extract(metadata, '$.cairnq_django.limit_key'), '') AS limit_key"
    return "\n".join([title, *ctes, "picked AS (", *selection, ")", *update]) + "\n"


class SQLiteStore(SQLStore):
    """Every protocol operation on a Django SQLite connection."""

    dialect = "sqlite"

    def _list(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values), ensure_ascii=False)

    def _bool(self, value: bool) -> int:
        return 1 if value else 0

    def _clock(self) -> dict[str, Any]:
        # One value per statement: every column a statement writes agrees.
        return {"now": _now_ms()}

    def _insert_many_params(self, params: list[dict[str, Any]]) -> dict[str, Any]:
        return {"rows": json.dumps(params, ensure_ascii=False)}

    def _limited_rows(self, params: dict[str, Any], fleet: FleetLimits) -> list[dict[str, Any]]:
        params = {**params, **self._clock()}  # one "now" for every step
        # Concurrency alone: the live calls are the running tasks, and no start is logged.
        counted = fleet.counts_running_tasks
        claim = "claim_concurrent" if counted else "claim_limited"
        claim = f"{claim}_keyed" if fleet.keyed else claim
        if counted and not _large_rows():
            # The count, the pick and the lease are one statement, which holds
            # the write lock from its first read as the plain claim does.
            leased = self._fetch(f"{claim}_leasing", leasing_claim(claim), params)
            return sorted(leased, key=lambda row: (-row["priority"], row["run_at_ms"], row["id"]))
        # savepoint=False: inside a claim session this joins its transaction.
        with transaction.atomic(using=self.alias, savepoint=False):
            # The write lock first: the counts below then hold until commit.
            self._rows("lock_key", {"key": None})
            if _large_rows():
                picked = self._fetch(claim, statement(self.dialect, claim), params)
                if not picked:
                    return []
                steps = {**params, "picked": json.dumps([row["id"] for row in picked])}
                self._step_rows("claim_write", steps)
                rows = self._step_rows("tasks_read", steps)
                keys = {row["id"]: row.get("limit_key", "") for row in picked}
            else:
                # Its own name: _fetch caches the columns each statement name answers with.
                leased = self._fetch(f"{claim}_leasing", leasing_claim(claim), params)
                if not leased:
                    return []
                rows = sorted(leased, key=lambda row: (-row["priority"], row["run_at_ms"], row["id"]))
                keys = {row["id"]: row.pop("limit_key", "") for row in rows}
            if counted:
                return rows
            # A call is ``batch`` rows in claim order; its first row stands for it.
            starts = [
                {
                    "scope": scope,
                    "limit_key": keys[row["id"]] if scope == fleet.name_scope else "",
                    "task_id": row["id"],
                    "attempt": row["attempt"],
                }
                for row in rows[:: fleet.batch]
                for scope in fleet.scopes
            ]
            record = {"starts": json.dumps(starts), "worker_id": params["worker_id"], "now": params["now"]}
            self._fetch("record_starts", statement(self.dialect, "record_starts"), record)
            return rows

    def _beat_rows(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        # SQLite has no INSERT inside a WITH: the registry refresh and the
        # lease renewal are two statements of one transaction (one commit).
        params = {**params, **self._clock()}  # one "now" for both
        with transaction.atomic(using=self.alias, savepoint=False):
            self._rows("worker_beat", params)
            if params["ids"] == "[]":
                return []
            return self._rows("heartbeat_batch", params)

    def _claim_scope(self, relaxed: bool) -> AbstractContextManager[object]:
        # A worker's claims commit at synchronous=NORMAL (durability.py).
        connection = connections[self.alias]
        if not relaxed or connection.in_atomic_block:
            return contextlib.nullcontext()
        connection.ensure_connection()
        return relaxed_commits(connection.connection)

    def _complete_many_params(self, items: list[tuple[str, str | None]]) -> dict[str, Any]:
        return {
            "items": json.dumps(
                [{"id": task_id, "result": result} for task_id, result in items],
                ensure_ascii=False,
            )
        }

    def _fail_many_params(self, items: list[tuple[str, str, bool, int]]) -> dict[str, Any]:
        return {
            "items": json.dumps(
                [
                    {"id": task_id, "error": error, "retryable": 1 if retryable else 0, "delay_ms": delay}
                    for task_id, error, retryable, delay in items
                ],
                ensure_ascii=False,
            )
        }

    def _snooze_many_params(self, items: list[tuple[str, int]]) -> dict[str, Any]:
        return {
            "items": json.dumps([{"id": task_id, "delay_ms": delay} for task_id, delay in items], ensure_ascii=False)
        }

    def _rows(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        steps = _LARGE_ROW_STEPS.get(name)
        if steps is None or not _large_rows():
            return super()._rows(name, params)
        pick, write, read = steps
        params = {**params, **self._clock()}  # one "now" for all three
        # savepoint=False: inside a claim session this joins its transaction.
        with transaction.atomic(using=self.alias, savepoint=False):
            picked = self._step_rows(pick, params)
            if not picked:
                return []
            params["picked"] = self._list([row["id"] for row in picked])
            self._step_rows(write, params)
            return picked if read is None else self._step_rows(read, params)

    def _step_rows(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return self._fetch(f"large_rows/{name}", step_sql(name), params)

    def _run(self, operation: Callable[[], T]) -> T:
        try:
            return self._run_waiting_out_locks(operation)
        except OperationalError as exc:
            if isinstance(exc, DatabaseFull) or not _is_full(exc):
                raise
            # SQLite rolled the failed write back; say which file ran out of room.
            path = str(connections[self.alias].settings_dict["NAME"])
            raise DatabaseFull(path, str(exc)) from exc

    def _run_waiting_out_locks(self, operation: Callable[[], T]) -> T:
        if connections[self.alias].in_atomic_block:
            return operation()
        budget_ms = int(get_config()["SQLITE_BUSY_TIMEOUT_MS"])
        deadline = time.monotonic() + budget_ms / 1000
        waits = 0
        while True:
            try:
                return operation()
            except OperationalError as exc:
                if not _is_busy(exc):
                    raise
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OperationalError(
                        f"cairnq: the SQLite database stayed locked by another writer for "
                        f"{budget_ms} ms (CAIRNQ['SQLITE_BUSY_TIMEOUT_MS']); gave up: {exc}"
                    ) from exc
                # Jittered, so contending processes spread out instead of
                # retrying in lockstep.
                waits += 1
                time.sleep(min(left, equal_jitter(capped_doubling(waits, _FIRST_BACKOFF_S, _MAX_BACKOFF_S))))
