"""Install the cairnq v1 schema the way the upstream migration ledger does.

The tables are shared with the upstream SDKs, which track their schema in the
``cairnq_migrations`` ledger, one row per upstream step file. This module
replays that ledger with the project's own DDL (``store/<dialect>/sql/schema/``):
the ledger table is created and committed first, then every step runs in its
own short transaction with the ledger locked, is skipped when its row exists,
and is recorded under the upstream step name otherwise. That is what lets one
database be installed by this app, by an upstream SDK, or by both in any
order -- including a database an older upstream SDK left at an earlier step,
whose old index shapes the later steps rebuild.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from .sql_files import folder_of
from typing import Any

from django.db import IntegrityError, OperationalError, ProgrammingError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

logger = logging.getLogger("cairnq_django.store.schema")

# The upstream step names, in ledger order. PostgreSQL alone has 0003 (the
# NOTIFY trigger); each name is also the file holding this project's DDL for it.
STEPS: dict[str, tuple[str, ...]] = {
    "sqlite": (
        "0001_init.sql",
        "0002_purge_index.sql",
        "0004_lease_index.sql",
        "0005_clear_terminal_lease.sql",
        "0006_claim_name_index.sql",
        "0007_purge_status_index.sql",
        "0008_claim_due_index.sql",
        "0009_purge_queue_index.sql",
        "0010_drop_status_index.sql",
    ),
    "postgres": (
        "0001_init.sql",
        "0002_purge_index.sql",
        "0003_notify.sql",
        "0004_lease_index.sql",
        "0005_clear_terminal_lease.sql",
        "0006_claim_name_index.sql",
        "0007_purge_status_index.sql",
        "0008_claim_due_index.sql",
        "0009_purge_queue_index.sql",
        "0010_drop_status_index.sql",
    ),
}
PROTOCOL_VERSION = "1"
SCHEMA_VERSION = "10"

# A step file holds several statements; each begins at a line starting with
# this marker. A marker rather than splitting on ";" because PL/pgSQL bodies
# contain semicolons.
STATEMENT_MARKER = "-- statement:"

# How long to keep retrying the switch to WAL, which needs a moment when no
# other connection has the file open in a conflicting way.
_WAL_BUDGET_S = 5.0
_WAL_RETRY_S = 0.05


def dialect_of(connection: BaseDatabaseWrapper) -> str:
    """Return the SQL dialect folder for a Django connection."""
    if connection.vendor == "postgresql":
        return "postgres"
    if connection.vendor == "sqlite":
        return "sqlite"
    raise ValueError(f"cairnq supports SQLite and PostgreSQL, not {connection.vendor!r}")


@cache
def _read(dialect: str, filename: str) -> str:
    return folder_of(dialect).joinpath("schema", filename).read_text("utf-8")


def statement(dialect: str, name: str) -> str:
    """Return one ledger statement (``ledger_lock`` ...) of ``store/<dialect>/sql/schema``."""
    return _read(dialect, f"{name}.sql")


@cache
def step_statements(dialect: str, step: str) -> tuple[str, ...]:
    """Split a step file into its statements, in order, without the marker lines."""
    if step not in STEPS[dialect]:
        raise ValueError(f"{step!r} is not a {dialect} schema step")
    chunks: list[list[str]] = []
    for line in _read(dialect, step).splitlines():
        if line.startswith(STATEMENT_MARKER):
            chunks.append([])
        elif chunks:
            chunks[-1].append(line)
        # Lines before the first marker are the file's header comment.
    statements = tuple(text for chunk in chunks if (text := "\n".join(chunk).strip()))
    if not statements:
        raise ValueError(f"schema step {dialect}/{step} holds no statement")
    return statements


def notify_function() -> str:
    """The statement that (re)creates ``cairnq_notify()``: the first of PostgreSQL's step 0003."""
    first = step_statements("postgres", "0003_notify.sql")[0]
    if not first.startswith("CREATE OR REPLACE FUNCTION cairnq_notify()"):
        raise ValueError("postgres/0003_notify.sql must open with the cairnq_notify() function")
    return first


def _now_ms() -> int:
    return int(time.time() * 1000)


def install(connection: BaseDatabaseWrapper, *, until: str | None = None) -> list[str]:
    """Bring the cairnq tables on ``connection`` up to the latest schema step.

    Safe to run on an empty database, on one an upstream SDK built (nothing is
    rebuilt, no ledger row is duplicated), on one an older SDK left at an
    earlier step, and from several processes at once. ``until`` stops after the
    named step (tests use it to build older databases). Returns the steps this
    call applied. Must run outside any transaction: each step commits on its own.
    """
    dialect = dialect_of(connection)
    steps = STEPS[dialect]
    if until is not None and until not in steps:
        raise ValueError(f"{until!r} is not a {dialect} schema step")
    connection.ensure_connection()
    if connection.in_atomic_block:
        raise transaction.TransactionManagementError(
            "cairnq's schema installer commits step by step; run it outside transaction.atomic()"
        )
    if dialect == "sqlite":
        _switch_to_wal(connection)
    _create_ledger(connection, dialect)
    applied: list[str] = []
    for step in steps:
        with _locked_ledger(connection, dialect) as cursor:
            cursor.execute(statement(dialect, "ledger_has"), {"name": step})
            if cursor.fetchone() is None:
                for sql in step_statements(dialect, step):
                    cursor.execute(sql)
                params: dict[str, Any] = {"name": step}
                if dialect == "sqlite":
                    params["now_ms"] = _now_ms()
                cursor.execute(statement(dialect, "ledger_record"), params)
                applied.append(step)
        if step == until:
            break
    if applied:
        logger.info("cairnq schema: applied %s", ", ".join(applied))
    return applied


def pending_steps(connection: BaseDatabaseWrapper) -> list[str]:
    """List the schema steps the ledger on ``connection`` does not record yet."""
    dialect = dialect_of(connection)
    if "cairnq_migrations" not in connection.introspection.table_names():
        return list(STEPS[dialect])
    with connection.cursor() as cursor:
        missing = []
        for step in STEPS[dialect]:
            cursor.execute(statement(dialect, "ledger_has"), {"name": step})
            if cursor.fetchone() is None:
                missing.append(step)
    return missing


def _switch_to_wal(connection: BaseDatabaseWrapper) -> None:
    # An in-memory database has no journal file to switch.
    if connection.creation.is_in_memory_db(connection.settings_dict["NAME"]):  # type: ignore[attr-defined]
        return
    deadline = time.monotonic() + _WAL_BUDGET_S
    while True:
        try:
            with connection.cursor() as cursor:
                cursor.execute(statement("sqlite", "journal_wal"))
                row = cursor.fetchone()
            if row is not None and str(row[0]).lower() == "wal":
                return
            failure = f"journal_mode stayed {row[0] if row else None!r}"
        except OperationalError as exc:
            failure = str(exc)
        if time.monotonic() >= deadline:
            raise OperationalError(f"could not switch the SQLite database to WAL mode: {failure}")
        time.sleep(_WAL_RETRY_S)


def _create_ledger(connection: BaseDatabaseWrapper, dialect: str) -> None:
    # Committed on its own, before any step, as upstream does. On PostgreSQL two
    # concurrent "CREATE TABLE IF NOT EXISTS" can both pass the existence check
    # and one then fails on the catalog's unique index; the retry sees the table.
    for attempt in range(3):
        try:
            with connection.cursor() as cursor:
                cursor.execute(statement(dialect, "ledger_create"))
            return
        except (IntegrityError, ProgrammingError):
            if attempt == 2:
                raise
            time.sleep(0.05)


@contextmanager
def _locked_ledger(connection: BaseDatabaseWrapper, dialect: str) -> Iterator[Any]:
    """Run one step's transaction with the ledger locked against other installers."""
    if dialect == "postgres":
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(statement(dialect, "ledger_lock"))
            yield cursor
        return
    # SQLite: BEGIN IMMEDIATE takes the write lock up front whatever the
    # connection's transaction_mode is, so the check and the apply cannot
    # interleave with another process's.
    raw = connection.connection
    with connection.cursor() as cursor:
        cursor.execute(statement(dialect, "ledger_lock"))
        try:
            yield cursor
        except BaseException:
            raw.rollback()
            raise
        raw.commit()
