"""Rows to ``Task`` instances: decode the JSON columns, defer large payloads, build the model.

Every read and every claim of the SQL store ends here, once per row, so
each function does the least Python work it can.
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models.base import ModelState

from ..models import Task
from ..protocol import payload as _payload

JSON_COLUMNS = ("payload", "result", "error", "metadata")

# A claimed Task whose payload stayed in the database carries its size here
# (``get_payload`` loads it; Django's deferred-field loading as a fallback).
PAYLOAD_BYTES = _payload.DEFERRED_SIZE_ATTR


def decode_row(row: dict[str, Any]) -> dict[str, Any]:
    """Decode the JSON columns of a raw row in place and return it.

    A column Python cannot decode (see ``payload.Undecodable``) holds the
    marker instead of raising, so one foreign row never hides the others.
    """
    for column in JSON_COLUMNS:
        if column in row:
            row[column] = _payload.decode_stored(row[column])
    return row


def decode_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decode the JSON columns of many raw rows in place, with one parse.

    The texts are joined into one JSON array: one ``json.loads`` instead of
    one per column. Each text is a whole value the database validated, so
    the array is valid exactly when every part is. When it is not (a text
    Python refuses, or malformed JSON written around SQLite's CHECK), or it
    holds another number of values than texts, the rows are decoded one by
    one and each undecodable column gets its marker.
    """
    texts: list[str] = []
    slots: list[tuple[dict[str, Any], str]] = []
    for row in rows:
        for column in JSON_COLUMNS:
            value = row.get(column)
            if type(value) is str:
                texts.append(value)
                slots.append((row, column))
            elif value is not None and column in row:
                row[column] = _payload.decode_stored(value)
    if not texts:
        return rows
    try:
        values = json.loads("[" + ",".join(texts) + "]")
    except (ValueError, RecursionError):
        values = None
    if values is None or len(values) != len(texts):
        for row, column in slots:
            row[column] = _payload.decode_stored(row[column])
        return rows
    for (row, column), value in zip(slots, values):
        row[column] = value
    return rows


def defer_large_payloads(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turn the claim's ``payload_bytes`` column into a deferred payload, in place.

    A claim returns a large payload's size instead of the payload (the
    column is null then): the row loses its ``payload`` key, so the Task
    built from it treats the field as deferred, and keeps the size.
    """
    for row in rows:
        size = row.pop("payload_bytes", None)
        if size is not None:
            del row["payload"]
            row[PAYLOAD_BYTES] = int(size)
    return rows


def task_from_row(alias: str, row: dict[str, Any]) -> Task:
    """Build a ``Task`` from a decoded row, by column name, without ``Model.__init__``.

    The instance is the one ``from_db`` builds (``_state.adding`` False,
    ``_state.db`` set), without ``Model.__init__``'s per-field work and
    without the ``pre_init``/``post_init`` signals: ``Task`` is unmanaged and
    the app connects nothing to them.
    """
    task = _new_task(Task)
    state = ModelState()
    state.adding = False
    state.db = alias
    row["_state"] = state
    task.__dict__ = row
    return task


_new_task = object.__new__
