"""Write rows as another SDK, raw SQL or an older version could: JSON texts
that pass the database's checks yet Python cannot decode, and running rows
without a lease. Shared by the store and worker suites."""

from __future__ import annotations

import json

import pytest
from django.db import DataError, connection

# Nested deeper than Python's recursion limit allows json to decode, and
# still within SQLite's JSON depth limit (2000), so json_valid accepts it.
DEEP = '{"deep":' + "[" * 1800 + "]" * 1800 + "}"
# Over Python's 4300-digit limit for int(); a valid JSON (and jsonb) number.
BIG_INT = '{"n":' + "9" * 5000 + "}"
# JSON5 (unquoted key, trailing comma): what SQLite 3.42-3.44's json_valid
# accepts, written here around the CHECK as such a SQLite would have let it.
JSON5 = "{a:1,}"
# Over the claim's 256 KiB inline limit, so the claim leaves it in the database.
LARGE_DEEP = '{"pad":"' + "x" * 300_000 + '","deep":' + "[" * 1800 + "]" * 1800 + "}"

KINDS = {"deep": DEEP, "big_int": BIG_INT, "json5": JSON5}


def assert_python_refuses_them() -> None:
    """The premise of every case using these texts, on this interpreter."""
    for text in (DEEP, BIG_INT, JSON5, LARGE_DEEP):
        with pytest.raises((ValueError, RecursionError)):
            json.loads(text)


def overwrite(task_id: str, column: str, text: str) -> None:
    """Write ``text`` into a JSON column of a row as a foreign writer would.

    On SQLite the CHECK (json_valid) is switched off around the write, as a
    SQLite whose json_valid accepts JSON5 would not have refused it. On
    PostgreSQL the jsonb column parses the text: malformed JSON is refused.
    """
    assert column in ("payload", "metadata", "result", "error")
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"UPDATE cairnq_tasks SET {column} = %s::jsonb WHERE id = %s", [text, task_id])
            return
        cursor.execute("PRAGMA ignore_check_constraints = ON")
        try:
            cursor.execute(f"UPDATE cairnq_tasks SET {column} = %s WHERE id = %s", [text, task_id])
        finally:
            cursor.execute("PRAGMA ignore_check_constraints = OFF")


def write_bad(task_id: str, column: str, kind: str) -> bool:
    """Write bad text of ``kind``; False where the database refuses it (PG: JSON5)."""
    if kind == "json5" and connection.vendor == "postgresql":
        with pytest.raises(DataError):
            overwrite(task_id, column, KINDS[kind])
        return False
    overwrite(task_id, column, KINDS[kind])
    return True


def leaseless(task_id: str, *, attempt: int, max_attempts: int = 3) -> None:
    """Make a row ``running`` with no lease and a foreign worker id."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE cairnq_tasks SET status = 'running', worker_id = 'foreign', lease_until_ms = NULL,"
            " attempt = %s, max_attempts = %s WHERE id = %s",
            [attempt, max_attempts, task_id],
        )
