"""Read only the start of each SQLite payload shown on an admin changelist page.

SQLite's ``substr()`` loads a whole value before cutting it, so a page of ten
50 MB payloads read 500 MB to show 60 characters each. Incremental blob I/O
reads just the pages holding the bytes asked for, and a blob's length is the
stored size without reading the value. PostgreSQL keeps its annotation in
``admin._with_payload_head``.
"""

from __future__ import annotations

import codecs
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from django.db import connections

from ..models import Task
from ..store.sql_files import load

# Python 3.10's sqlite3 has no blobopen; there the changelist keeps substr().
BLOB_IO = hasattr(sqlite3.Connection, "blobopen")


def reads_blobs(alias: str) -> bool:
    """Return True when the changelist on ``alias`` reads payload heads with blob I/O."""
    return BLOB_IO and connections[alias].vendor == "sqlite"


def fill_payload_heads(alias: str, tasks: Sequence[Task], chars: int) -> None:
    """Set ``payload_head`` (at most ``chars`` characters) and ``payload_bytes`` on each task.

    One query finds the page's rowids; each payload is then read through a
    read-only blob handle, which is no query. A row deleted since the page was
    read, or a value that is not text, leaves both attributes None.
    """
    if not tasks:
        return
    connection = connections[alias]
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute(load("sqlite", "admin_payload_rowids"), {"ids": json.dumps([task.pk for task in tasks])})
        rowids = {task_id: (rowid, encoding) for task_id, rowid, encoding in cursor.fetchall()}
    raw = connection.connection
    for task in tasks:
        head = _read_head(raw, task.pk, *rowids[task.pk], chars) if task.pk in rowids else None
        # The attributes PostgreSQL's annotations give; payload_preview reads them.
        task.payload_head, task.payload_bytes = head or (None, None)  # type: ignore[attr-defined]


def _read_head(raw: Any, task_id: str, rowid: int, encoding: str, chars: int) -> tuple[str, int] | None:
    table = Task._meta.db_table
    try:
        with raw.blobopen(table, Task._meta.get_field("payload").column, rowid, readonly=True) as payload:
            # The open payload handle pins this connection's read snapshot, so
            # the id read here is the payload's own row: a rowid freed by a
            # purge or renumbered by VACUUM since the lookup is caught.
            with raw.blobopen(table, Task._meta.pk.column, rowid, readonly=True) as key:
                if key.read() != task_id.encode(encoding):
                    return None
            size = len(payload)
            # A character is at most four bytes (UTF-8, or a UTF-16 surrogate pair).
            data = payload.read(chars * 4 + 4)
    except sqlite3.Error:
        # The row is gone, or the value is NULL or not text: no blob to open.
        return None
    # Not final: a character cut at the end of the read is dropped, not replaced.
    text = codecs.getincrementaldecoder(encoding)(errors="replace").decode(data)
    return text[:chars], size
