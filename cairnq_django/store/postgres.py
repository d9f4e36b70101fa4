"""The PostgreSQL store: the database supplies every timestamp (protocol 2.1).

Lists bind as text arrays, booleans natively. Contention needs no retry loop
here: claims, recovery and purge skip locked rows, keyed operations queue on
the shared advisory lock, and everything else is one short statement.

With psycopg 3 the store's statements are sent with server-side parameters
and prepared on first use (``CAIRNQ["PREPARED_STATEMENTS"]``): Django's
default cursor inlines parameters on the client, so the server parses and
plans every claim and settlement again, and quoting the values costs the
worker as much Python time as reading the answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from django.db import connections
from django.db.backends.postgresql.psycopg_any import is_psycopg3

from ..conf import get_config
from ..models import Task
from .base import SubmitSpec
from ._common import SQLStore
from .sql import statement

# Slice size of a payload read by id (get_payload.sql): what the client
# buffers at a time beyond the payload's own text.
PAYLOAD_SLICE_BYTES = 1 << 20


_NEVER_BY_COUNT = 2**62

# Batch writes keyed by an array of ids stay unprepared: their best plan
# depends on how many ids they carry, which a prepared statement's generic
# plan cannot see. Measured: a prepared complete_many left to a generic plan
# walked every 'running' entry of the status index (dead ones included) for
# each batch, and a batch=256 drain fell from ~7,700/s to ~900/s.
_PLANNED_PER_CALL = frozenset(
    {"complete_many", "fail_many", "heartbeat_batch", "cancel_many", "retry_many", "release"}
)

# insert_tasks.sql reads these from each row object as JSON scalars.
_SCALAR_COLUMNS = (
    "id", "name", "queue", "max_attempts", "priority", "delay_ms",
    "parent_id", "root_id", "correlation_id",
)
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

# A bulk submit of more unkeyed rows than this streams them with COPY; fewer
# go as one INSERT (COPY costs a clock reading first, an extra round trip).
COPY_MIN_ROWS = 100
# Rows formatted between two rounds of building the returned Tasks: psycopg
# sends COPY data in 32 KiB buffers (about 200 small rows), so the server
# inserts one part while the client builds the rows of the part before.
COPY_CHUNK = 250


@lru_cache(maxsize=1)
def _prepared_cursor_class() -> type | None:
    """A Django cursor class that binds on the server and prepares every statement.

    None under psycopg2, whose cursors cannot do either.
    """
    try:
        from django.db.backends.postgresql.base import ServerBindingCursor
    except ImportError:
        return None

    class PreparedCursor(ServerBindingCursor):  # type: ignore[misc,valid-type]
        # The statements are a fixed set of files, so the per-connection cache
        # of prepared statements stays small.
        def execute(self, query: Any, params: Any = None, *, prepare: Any = None, binary: Any = None) -> Any:
            return super().execute(query, params, prepare=True, binary=binary)  # type: ignore[misc]

    return PreparedCursor


class PostgresStore(SQLStore):
    """Every protocol operation on a Django PostgreSQL connection."""

    dialect = "postgres"

    def _cursor(self, statement: str = "") -> Any:
        connection = connections[self.alias]
        cursor_class = _prepared_cursor_class()
        # While Django logs queries (DEBUG, assertNumQueries) the default
        # cursor runs them, so the log shows each statement with its values.
        if (
            cursor_class is None
            or connection.queries_logged
            or not get_config()["PREPARED_STATEMENTS"]
            or statement in _PLANNED_PER_CALL
        ):
            return connection.cursor()
        # What connection.cursor() does, with our cursor class: health check,
        # connect, then Django's wrapper (query logging, execute_wrappers).
        connection.close_if_health_check_failed()
        connection.ensure_connection()
        raw = connection.connection
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

    def _claim_commit(self, relaxed: bool) -> dict[str, Any]:
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

    def _insert_unkeyed(self, plain: list[tuple[int, SubmitSpec]]) -> Iterable[tuple[int, Task]]:
        # The server spends about as long inserting a row (ten indexes, the
        # NOTIFY trigger) as the client spends preparing and returning it.
        # COPY lets the two overlap: rows stream out as they are formatted
        # (in C) and the server inserts them as they arrive, with no per-row
        # statement and no large parameter to parse. While Django logs
        # queries (DEBUG, assertNumQueries) the INSERT statements run
        # instead, so the log shows what was written.
        connection = connections[self.alias]
        if len(plain) <= COPY_MIN_ROWS or connection.queries_logged or not is_psycopg3:
            yield from super()._insert_unkeyed(plain)
            return
        now = self.now_ms()  # COPY cannot read the clock; one reading serves the batch
        with connection.cursor() as wrapper, connection.wrap_database_errors:
            cursor = wrapper.cursor  # psycopg's own: Django's wrapper has no COPY
            with cursor.copy(statement(self.dialect, "copy_tasks")) as copy:
                for start in range(0, len(plain), COPY_CHUNK):
                    chunk = plain[start : start + COPY_CHUNK]
                    params = self._chunk_params(chunk)
                    stamps = []
                    for row in params:
                        run_at = now + row["delay_ms"]
                        copy.write_row(
                            (
                                row["id"], row["name"], row["queue"], "queued", row["payload"],
                                row["metadata"], row["max_attempts"], row["priority"], run_at,
                                row["parent_id"], row["root_id"], row["correlation_id"], now, now,
                            )
                        )
                        stamps.append((row["id"], now, now, run_at))
                    yield from zip((i for i, _ in chunk), self._inserted_tasks(params, stamps))

    def _complete_many_params(self, items: list[tuple[str, str | None]]) -> dict[str, Any]:
        return {"ids": [i for i, _ in items], "results": [r for _, r in items]}

    def _fail_many_params(self, items: list[tuple[str, str, bool, int]]) -> dict[str, Any]:
        return {
            "ids": [item[0] for item in items],
            "errors": [item[1] for item in items],
            "retryable": [item[2] for item in items],
            "delays": [item[3] for item in items],
        }

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


def _fetched(cursor: Any, sql: str, params: dict[str, Any]) -> list[Any]:
    """All rows at once, for a driver that cannot stream (psycopg2)."""
    cursor.execute(sql, params)
    return cursor.fetchall()
