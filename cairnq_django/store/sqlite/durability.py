"""SQLite: a worker's claims commit without waiting for the disk (``ASYNC_CLAIM_COMMIT``).

A claim is a write like any other, and with ``synchronous=FULL`` every SQLite
commit waits for an ``fsync`` of the write-ahead log: the largest part of a
single-task claim's time. In WAL mode ``synchronous=NORMAL`` skips that flush
at commit; the commit is still atomic and survives the worker process
crashing (the log is written, the operating system holds it), and only an
operating-system crash or power loss can undo it. The log is one file written
in order, so the next FULL commit from any connection (a completion, a
submit, a heartbeat) flushes every claim before it. This is the trade the
PostgreSQL claims make with ``synchronous_commit = off``; see
docs/performance-notes.md for what a lost claim costs (the task runs again).

Only the claim session's own statements run relaxed: the level the
connection had is restored when the session ends. Rollback-journal databases
are left alone (NORMAL there risks more than the last commits), as is a
connection already at NORMAL or OFF, or one inside a transaction.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

# PRAGMA synchronous levels.
NORMAL = 1
FULL = 2


@contextlib.contextmanager
def relaxed_commits(connection: sqlite3.Connection) -> Iterator[bool]:
    """Run the block at ``synchronous=NORMAL`` when that only defers the flush; yield whether it does."""
    level = connection.execute("PRAGMA synchronous").fetchone()[0]
    relax = (
        level >= FULL
        and not connection.in_transaction
        and connection.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
    )
    if not relax:
        yield False
        return
    connection.execute(f"PRAGMA synchronous={NORMAL}")
    try:
        yield True
    finally:
        try:
            connection.execute(f"PRAGMA synchronous={int(level)}")
        except sqlite3.Error:
            # The connection broke or was closed meanwhile: a new one starts
            # from the settings again, with nothing relaxed.
            pass
