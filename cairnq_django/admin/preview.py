"""Read only the start of each payload shown on an admin changelist page.

SQLite's ``substr()`` loads a whole value before cutting it, so a page of ten
50 MB payloads read 500 MB to show 60 characters each. Incremental blob I/O
reads just the pages holding the bytes asked for, and a blob's length is the
stored size without reading the value. PostgreSQL annotates the page query
instead (``with_payload_head``).
"""

from __future__ import annotations

import codecs
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.db.models import Case, F, Func, IntegerField, QuerySet, TextField, Value, When
from django.db.models.functions import Cast, Substr
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from .changelist import BoundedChangeList
from .values import EMPTY
from ..models import Task
from ..protocol.payload import Undecodable, decode_stored
from ..store.sql_files import load

# The changelist reads at most this much of a payload from the database.
PREVIEW_SOURCE_CHARS = 2048

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


def with_payload_head(queryset: QuerySet[Task]) -> QuerySet[Task]:
    """Load only the start of each payload for the changelist, never whole documents.

    A page of 50 rows holding 50 MB payloads would otherwise read, decode and
    re-encode gigabytes. SQLite reads a prefix of each row of the page through
    blob I/O once the page is fetched (``PreviewChangeList``); PostgreSQL cannot
    cut jsonb without converting all of it to text, so it returns small
    payloads whole and for larger ones only their stored size
    (``pg_column_size``, no detoast).
    """
    queryset = queryset.defer("payload")
    if reads_blobs(queryset.db):
        return queryset
    if connections[queryset.db].vendor == "postgresql":
        size = Func(F("payload"), function="pg_column_size", output_field=IntegerField())
        head = Case(
            When(payload_bytes__lte=PREVIEW_SOURCE_CHARS, then=Cast("payload", TextField())),
            default=Value(None),
            output_field=TextField(),
        )
        return queryset.annotate(payload_bytes=size).annotate(payload_head=head)
    # SQLite without blob I/O (Python 3.10): substr() loads each whole value.
    return queryset.annotate(
        payload_head=Substr(Cast("payload", TextField()), 1, PREVIEW_SOURCE_CHARS + 1)
    )


class PreviewChangeList(BoundedChangeList):
    """A changelist that reads the SQLite payload heads of its page in one pass."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        alias = self.result_list.db
        if reads_blobs(alias):
            # Evaluates the page query; the template then iterates its cached rows.
            fill_payload_heads(alias, list(self.result_list), PREVIEW_SOURCE_CHARS + 1)


def preview_from_head(head: str | None, stored_bytes: int | None) -> str:
    if head is None and stored_bytes is None:
        # SQLite: the row went away between the page query and the blob read.
        return EMPTY
    if head is None:
        return str(_("(large payload: %(size)s bytes stored)") % {"size": stored_bytes})
    if len(head) <= PREVIEW_SOURCE_CHARS:
        # The whole payload: normalise it, or say Python cannot decode it.
        return compact_json(decode_stored(head))
    return head


def compact_json(value: Any) -> str:
    if isinstance(value, Undecodable):
        return f"{_('undecodable JSON:')} {value.text}"
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except RecursionError:
        return str(_("(nested too deeply to show here)"))
