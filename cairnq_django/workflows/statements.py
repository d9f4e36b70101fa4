"""The workflows' SQL: one file a statement per dialect, in ``workflows/sql/<dialect>/``.

The statements take their lists as one JSON parameter (``jsonb_to_recordset``
on PostgreSQL, ``json_each`` on SQLite), so a settlement of any number of
nodes is one statement per step. PostgreSQL reads the server's clock;
SQLite's statements take ``now`` from the process, as the store's do.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from importlib import resources
from typing import Any

from django.db import connections

from ..store.sql_files import sendable

_DIALECTS = {"postgresql": "postgres", "sqlite": "sqlite"}


@lru_cache(maxsize=None)
def statement(dialect: str, name: str) -> str:
    """The text sent for statement ``name`` of ``dialect``; read once per process."""
    folder = resources.files("cairnq_django.workflows").joinpath("sql", dialect)
    return sendable(folder.joinpath(f"{name}.sql").read_text("utf-8"))


def execute(alias: str, name: str, rows: list[dict[str, Any]], key: str = "ended") -> list[tuple[Any, ...]]:
    """Run statement ``name`` on ``alias`` with ``rows`` as its JSON list parameter ``key``; its rows."""
    dialect = _DIALECTS[connections[alias].vendor]
    params: dict[str, Any] = {key: json.dumps(rows, separators=(",", ":"), ensure_ascii=False)}
    if dialect == "sqlite":
        params["now"] = int(time.time() * 1000)
    with connections[alias].cursor() as cursor:
        cursor.execute(statement(dialect, name), params)
        return cursor.fetchall()
