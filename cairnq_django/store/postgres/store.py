"""The PostgreSQL store: the database supplies every timestamp (protocol 2.1).

Lists bind as text arrays, booleans natively. Contention needs no retry loop
here: claims, recovery and purge skip locked rows, keyed operations queue on
the shared advisory lock, and everything else is one short statement.

With psycopg 3 the store's statements are sent with server-side parameters
and prepared on first use (``CAIRNQ["PREPARED_STATEMENTS"]``): Django's
default cursor inlines parameters on the client, so the server would parse
and plan every claim and settlement again, and the worker would spend
Python time quoting values.

Behind a transaction pooler (``CAIRNQ["TRANSACTION_POOLING"]``) nothing here
relies on the server session: no preparation by default, no session ``SET``,
and the worker's timeouts travel with each statement (transaction_timeouts.py).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from typing import Any

from django.db import connections
from django.db.backends.postgresql.psycopg_any import is_psycopg3

try:  # Django defines it only under psycopg 3: psycopg2 cursors cannot bind on the server.
    from django.db.backends.postgresql.base import ServerBindingCursor
except ImportError:
    ServerBindingCursor = None  # type: ignore[assignment,misc]

from ...conf import get_config, prepared_statements
from ...models import Task
from ..base import SubmitSpec
from ...protocol.limits import FleetLimits
from ...protocol.ids import task_ids as new_task_ids
from ..sql_store import SQLStore, collector_paused
from . import transaction_timeouts
from .claim_cursor import HEAD_RUN_AT_MS, ClaimCursors, ExpiryFloor, Start, statement_params
from .copy_text import text
from ..sql_files import statement

# Slice size of a payload read by id (get_payload.sql): what the client
# buffers at a time beyond the payload's own text.
PAYLOAD_SLICE_BYTES = 1 << 20


_NEVER_BY_COUNT = 2**62

# Planned on every call, never prepared. Batch writes keyed by an array of
# ids: their best plan depends on how many ids they carry, which a generic
# plan cannot see. Lease recovery: a worker's claim connection keeps one plan
# per prepared statement (reuse_claim_plans.sql), and recovery's best index
# depends on the clock reading; it runs about once per lease period.
_PLANNED_PER_CALL = frozenset(
    {
        "complete_many", "fail_many", "snooze_many", "heartbeat_batch", "worker_beat", "cancel_many", "retry_many",
        "release",
        "recover_leases",
    }
)

# Prepared only on a worker's claim connection (reuse_claim_plans.sql, which
# keeps them off sequential scans). Elsewhere PostgreSQL may settle on a
# generic plan after five runs, and one settled on while the table was small
# scans the whole table on every claim from then on. One-name claims too:
# planning each call halved a one-name worker's drain. The probe too: parsing
# and planning it took 1.1 of its 1.5 ms (docs/performance.md).
_CLAIMS = frozenset({"claim", "claim_one_queue", "claim_one_queue_one_name", "claim_one_name", "claimable_probe"})

# insert_tasks.sql reads these from each row object as JSON scalars.
_SCALAR_COLUMNS = (
    "id", "name", "queue", "max_attempts", "priority", "delay_ms",
    "parent_id", "root_id", "correlation_id",
)
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

# A bulk submit of more unkeyed rows than this streams them with COPY; fewer
# go as one INSERT (COPY costs a clock reading first, an extra round trip).
# The store reads this many items before it knows which way to go.
COPY_MIN_ROWS = 40
# Task ids made at a time for COPY rows: one clock reading and one read of the
# random source per run, each run in ascending order (see ids.task_ids).
COPY_ID_RUN = 256
# COPY rows are handed to the driver in pieces of about this many characters
# (libpq sends in 8 KiB blocks), so the server starts inserting sooner.
COPY_WRITE_BYTES = 8192


@lru_cache(maxsize=1)
def _prepared_cursor_class() -> type | None:
    """A Django cursor class that binds on the server and prepares every statement.

    None under psycopg2, whose cursors cannot do either.
    """
    if ServerBindingCursor is None:
        return None

    class PreparedCursor(ServerBindingCursor):  # type: ignore[misc,valid-type]
        # The statements are a fixed set of files, so the per-connection cache
        # of prepared statements stays small.
        def execute(self, query: Any, params: Any = None, *, prepare: Any = None, binary: Any = None) -> Any:
            return super().execute(query, params, prepare=True, binary=binary)  # type: ignore[misc]

    return PreparedCursor


def _binds_on_client(cursor: Any) -> bool:
    """True if a Django cursor interpolates parameters itself (Django's default), so it may send two statements."""
    from psycopg import ClientCursor  # psycopg 3 only: the caller checked is_psycopg3

    return isinstance(cursor.cursor, ClientCursor)


def _client_cursor(connection: Any) -> Any:
    """A client-binding cursor on ``connection`` (under OPTIONS server_side_binding=True)."""
    from psycopg import ClientCursor  # psycopg 3 only: the caller checked is_psycopg3

    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(ClientCursor(connection.connection))


def _client_binding_cursor(connection: Any) -> Any:
    """Django's cursor on ``connection``, or a client-binding one where OPTIONS bind on the server."""
    cursor = connection.cursor()
    if is_psycopg3 and not _binds_on_client(cursor):
        cursor.close()
        return _client_cursor(connection)
    return cursor


class PostgresStore(SQLStore):
    """Every protocol operation on a Django PostgreSQL connection."""

    dialect = "postgres"

    def __init__(self, alias: str) -> None:
        super().__init__(alias)
        # Where this process's next claim of each queue starts (claim_cursor.py).
        self.claim_cursors = ClaimCursors()
        # From which lease a probe looks for expired ones (claim_cursor.py).
        self.expiry_floor = ExpiryFloor()

    def _cursor(self, statement: str = "") -> Any:
        connection = connections[self.alias]
        head = transaction_timeouts.prefix(connection)
        if head:
            # The timeouts and the statement go as one message, which only
            # a client-binding cursor sends (and nothing prepares).
            return transaction_timeouts.BoundedCursor(_client_binding_cursor(connection), head)
        cursor_class = _prepared_cursor_class()
        # While Django logs queries (DEBUG, assertNumQueries) the default
        # cursor runs them, so the log shows each statement with its values.
        if (
            cursor_class is None
            or connection.queries_logged
            or not prepared_statements(get_config())
            or statement in _PLANNED_PER_CALL
        ):
            return connection.cursor()
        # What connection.cursor() does, with our cursor class: health check,
        # connect, then Django's wrapper (query logging, execute_wrappers).
        connection.close_if_health_check_failed()
        connection.ensure_connection()
        raw = connection.connection
        if statement in _CLAIMS and not getattr(raw, "_cairnq_reuses_plans", False):
            return connection.cursor()
        if raw.prepare_threshold is None:
            # psycopg prepares nothing while the threshold is None (Django's
            # default). A threshold no query reaches lets our explicit
            # prepare=True through and leaves every other query unprepared.
            raw.prepare_threshold = _NEVER_BY_COUNT
        with connection.wrap_database_errors:
            return connection._prepare_cursor(cursor_class(raw))  # type: ignore[attr-defined]

    def _list(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    def _bool(self, value: bool) -> bool:
        return bool(value)

    def _clock(self) -> dict[str, Any]:
        return {}

    def _reuse_claim_plans(self) -> None:
        config = get_config()
        if config["TRANSACTION_POOLING"] or not prepared_statements(config):
            # Only prepared statements keep plans, and a session SET would
            # stay on whichever server connection the pooler lent.
            return
        connection = connections[self.alias]
        # Runs before every claim: the usual answer is one attribute read.
        raw = connection.connection
        if raw is not None and getattr(raw, "_cairnq_reuses_plans", False):
            return
        if connection.in_atomic_block:
            return  # a rollback would undo the SET; the next session outside one sets it
        connection.ensure_connection()
        raw = connection.connection
        with connection.cursor() as cursor:  # a SET: nothing to prepare
            cursor.execute(statement(self.dialect, "reuse_claim_plans"))
        # On the driver's connection object, so a reconnect starts unset.
        raw._cairnq_reuses_plans = True

    def _probe(
        self, params: dict[str, Any], queues: Sequence[str], names: Sequence[str] | None
    ) -> list[dict[str, Any]]:
        # In the caller's transaction (see claim.claim_session): from the head, and no cursor kept.
        kept = not self._in_transaction()
        if kept:
            starts = self.claim_cursors.probe_starts(queues, names)
            since = self.expiry_floor.since(full=bool(params["leaseless"]))
        else:
            starts, since = [Start.head(queue) for queue in queues], HEAD_RUN_AT_MS
        began = time.perf_counter()
        rows = self._rows("claimable_probe", {**params, **statement_params(starts), "expired_from_ms": since})
        if kept:
            self.claim_cursors.probed(names, starts, rows, time.perf_counter() - began)
            self.expiry_floor.probed(int(rows[0]["now_ms"]), expired=bool(rows[0]["expired"]))
        return rows

    def _draw(
        self,
        statement: str,
        params: dict[str, Any],
        queues: Sequence[str],
        names: Sequence[str] | None,
        lease_ms: int,
        *,
        from_head: bool = False,
    ) -> list[Task]:
        if from_head:
            return self._tasks(statement, {**params, **statement_params([Start.head(queue) for queue in queues])})
        starts = self.claim_cursors.starts(queues, names)
        began = time.perf_counter()
        rows = self._tasks(statement, {**params, **statement_params(starts)})
        took_s = time.perf_counter() - began
        self.claim_cursors.advance(names, starts, rows, lease_ms, took_s, emptied=self._emptied(queues, rows, params))
        return rows

    def _emptied(self, queues: Sequence[str], rows: list[Task], params: dict[str, Any]) -> list[str]:
        """The queues a draw found without a claimable row: it leased fewer than it asked for, none of theirs.

        A paused queue's draw finds nothing whatever it holds, so it is left out.
        """
        if len(rows) >= params["limit"]:
            return []
        found = {row.queue for row in rows}
        empty = [queue for queue in queues if queue not in found]
        if not empty:
            return []
        paused = {row["queue"] for row in self._rows("paused_queues", {"queues": empty})}
        return [queue for queue in empty if queue not in paused]

    def _limited_rows(self, params: dict[str, Any], fleet: FleetLimits) -> list[dict[str, Any]]:
        # One call of the claim function the migrations create: it takes the
        # scopes' locks, then counts and claims with a fresh snapshot, so the
        # count includes what the lock holder before it committed. A name
        # limited by concurrency alone counts its running tasks and logs no start.
        claim = "claim_concurrent" if fleet.counts_running_tasks else "claim_limited"
        return self._rows(f"{claim}_keyed" if fleet.keyed else claim, params)

    def _commit_mode(self, relaxed: bool) -> dict[str, Any]:
        # None keeps the session's own setting (set_config with its current value).
        return {"synchronous_commit": "off" if relaxed else None}

    def _insert_many_params(self, params: list[dict[str, Any]]) -> dict[str, Any]:
        # One JSON array of row objects. The payload and metadata are already
        # JSON text: spliced in as values (not strings to parse again), the
        # server reads each once. One C-speed encode per row beats psycopg's
        # per-element quoting of eleven text arrays.
        parts = []
        for row in params:
            head = _encode({key: row[key] for key in _SCALAR_COLUMNS})
            parts.append(f'{head[:-1]},"payload":{row["payload"]},"metadata":{row["metadata"]}}}')
        return {"rows": "[" + ",".join(parts) + "]"}

    def _streams_submits(self) -> bool:
        # Nothing here retries a whole operation, so a bulk submit writes
        # while the caller's items are still being checked and encoded.
        return True

    def _insert_unkeyed(self, plain: Iterable[tuple[int, SubmitSpec]]) -> Iterator[tuple[int, Task]]:
        # The server spends longer inserting a row (ten indexes, the NOTIFY
        # trigger) than the client spends checking, encoding and returning
        # it. COPY lets the two overlap: rows stream out as they are spelled
        # and the server inserts them as they arrive, with no per-row
        # statement and no large parameter to parse, while the client reads
        # the next items. While Django logs queries (DEBUG, assertNumQueries)
        # the INSERT statements run instead, so the log shows what was written.
        connection = connections[self.alias]
        pending = iter(plain)
        head = list(itertools.islice(pending, COPY_MIN_ROWS + 1))
        if len(head) <= COPY_MIN_ROWS or connection.queries_logged or not is_psycopg3:
            yield from super()._insert_unkeyed(itertools.chain(head, pending))
            return
        now = self.now_ms()  # COPY cannot read the clock; one reading serves the batch
        with connection.cursor() as wrapper, connection.wrap_database_errors:
            cursor = wrapper.cursor  # psycopg's own: Django's wrapper has no COPY
            with cursor.copy(statement(self.dialect, "copy_tasks")) as copy, collector_paused():
                sent = _copy_rows(copy, itertools.chain(head, pending), now)
                # The server inserts rows in batches and runs their NOTIFY
                # triggers when the COPY ends, so it is still busy now: build
                # the returned Tasks while it works, not before the rows go.
                tasks = self._inserted_tasks(
                    [self._insert_params(spec, task_id) for _, spec, task_id, _ in sent],
                    [(task_id, now, now, run_at) for _, _, task_id, run_at in sent],
                )
                # Hand them over before the COPY ends too: the caller files
                # each by its position while the server is still inserting.
                # (A caller that stops early ends the COPY with an error,
                # and its transaction rolls back as on any other error.)
                yield from zip((position for position, *_ in sent), tasks)
            # The collector's postponed pass ran as the COPY ended, while
            # the client waits for the server to finish anyway.

    def _complete_many_params(self, items: list[tuple[str, str | None]]) -> dict[str, Any]:
        # One JSON object of the results by id (each already JSON text): a row finds its own by key.
        results = ",".join(f"{json.dumps(task_id)}:{result}" for task_id, result in items if result is not None)
        return {"ids": [task_id for task_id, _ in items], "results": "{" + results + "}"}

    def _fail_many_params(self, items: list[tuple[str, str, bool, int]]) -> dict[str, Any]:
        return {
            "ids": [item[0] for item in items],
            "errors": [item[1] for item in items],
            "retryable": [item[2] for item in items],
            "delays": [item[3] for item in items],
        }

    def _snooze_many_params(self, items: list[tuple[str, int]]) -> dict[str, Any]:
        return {"ids": [task_id for task_id, _ in items], "delays": [delay for _, delay in items]}

    def _payload_text(self, task_id: str) -> str | None:
        # Slices, streamed one row at a time (see get_payload.sql), gathered
        # into one buffer by their offsets.
        params = {"id": task_id, "slice_bytes": PAYLOAD_SLICE_BYTES}
        body = bytearray()
        found = False
        with connections[self.alias].cursor() as wrapper:
            cursor = wrapper.cursor  # psycopg's own: Django's wrapper cannot stream
            sql = statement(self.dialect, "get_payload")
            rows = cursor.stream(sql, params) if hasattr(cursor, "stream") else _fetched(cursor, sql, params)
            for at, part in rows:
                found = True
                end = at - 1 + len(part)
                if end > len(body):
                    body.extend(bytes(end - len(body)))
                body[at - 1 : end] = part
        if not found:
            return None
        text = body.decode("utf-8")
        del body
        return text


# What _copy_rows sent for one spec: (position, spec, task id, run_at_ms).
_Sent = tuple[int, SubmitSpec, str, int]


def _copy_rows(copy: Any, plain: Iterable[tuple[int, SubmitSpec]], now: int) -> list[_Sent]:
    """Write every (position, spec) as a COPY row of a queued task stamped ``now``.

    Specs are read one at a time, so the first row goes out as soon as the
    first item is checked; ids come in runs of ``COPY_ID_RUN``. Rows are
    spelled here (see _copy_text) and handed over about ``COPY_WRITE_BYTES``
    at a time: psycopg's own ``write_row`` holds 32 KiB before it sends, and
    the server starts inserting only once it holds 64 KiB of rows, so
    smaller hand-overs let it start sooner.
    """
    write = copy.write
    sent = []
    lines: list[str] = []
    held = 0
    for (position, spec), task_id in zip(plain, _task_id_runs()):
        run_at = now + spec.delay_ms
        line = (
            f"{task_id}\t{text(spec.name)}\t{text(spec.queue)}\tqueued\t{text(spec.payload_json)}\t"
            f"{text(spec.metadata_json)}\t{spec.max_attempts:d}\t{spec.priority:d}\t{run_at:d}\t"
            f"{text(spec.parent_id)}\t{text(spec.root_id or task_id)}\t{text(spec.correlation_id)}\t"
            f"{now:d}\t{now:d}\n"
        )
        lines.append(line)
        held += len(line)
        if held >= COPY_WRITE_BYTES:
            write("".join(lines))
            lines.clear()
            held = 0
        sent.append((position, spec, task_id, run_at))
    if lines:
        write("".join(lines))
    return sent


def _task_id_runs() -> Iterator[str]:
    """Task ids without end, made ``COPY_ID_RUN`` at a time."""
    while True:
        yield from new_task_ids(COPY_ID_RUN)


def _fetched(cursor: Any, sql: str, params: dict[str, Any]) -> list[Any]:
    """All rows at once, for a driver that cannot stream (psycopg2)."""
    cursor.execute(sql, params)
    return cursor.fetchall()
