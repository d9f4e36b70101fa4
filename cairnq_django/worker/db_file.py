"""Notice a SQLite database file deleted or replaced under a running worker.

SQLite keeps using the file it opened: after ``rm`` or a ``mv`` of another
file over the path, the worker's connections still read and write the old,
now nameless file, so nothing fails while every new task goes to the new
file and is never seen. The worker records the file's identity (device and
inode) when it starts and compares it now and then; a difference ends the
worker with a clear message and a non-zero exit, so a supervisor restarts it
on whatever file the path names now.
"""

from __future__ import annotations

import os
import sqlite3

from django.db import DatabaseError, connections


class DatabaseFile:
    """The file behind a SQLite alias, as it was when the worker started."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.identity = _identity(path)

    @classmethod
    def of(cls, alias: str) -> DatabaseFile | None:
        """The open main database file of ``alias`` (None: not SQLite, in memory, or unreadable)."""
        connection = connections[alias]
        if connection.vendor != "sqlite":
            return None
        try:
            connection.ensure_connection()
            rows = connection.connection.execute("PRAGMA database_list").fetchall()
        except (DatabaseError, sqlite3.Error):
            return None
        path = next((row[2] for row in rows if row[1] == "main" and row[2]), None)
        if not path:
            return None
        found = cls(path)
        return found if found.identity is not None else None

    def change(self) -> str | None:
        """Describe how the path no longer names the file opened at start; None if it still does."""
        now = _identity(self.path)
        if now == self.identity:
            return None
        if now is None:
            return f"SQLite database file {self.path} was deleted"
        return f"SQLite database file {self.path} was replaced by another file"


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
