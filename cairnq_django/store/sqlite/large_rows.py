"""The statements of SQLite's large-row mode (see ``store/sqlite/store.py``).

Most of them are a shipped single statement with one change, so they are
derived from it here rather than kept as copies that could drift:

* ``<write>_write`` -- the write's UPDATE without its RETURNING clause,
  restricted to the ids the pick found (``%(picked)s``);
* ``<claim shape>_pick`` -- the claim's own selection, the subquery of its
  ``WHERE id IN (...)``, unchanged;
* ``claim_write`` -- ``claim_picked.sql`` (the fleet-limited claims' lease of
  the picked ids) without its RETURNING clause.

The rest (the picks of the other writes, the reads)
have no single-statement twin and live in ``store/sqlite/sql/large_rows/``.
"""

from __future__ import annotations

from functools import lru_cache

from ..sql_files import statement

DERIVED_WRITES = frozenset(
    {"complete_many", "fail_many", "snooze_many", "heartbeat_batch", "release", "heartbeat", "progress", "complete", "succeed", "fail"}
)
CLAIM_SHAPES = frozenset({"claim", "claim_one_name", "claim_one_queue", "claim_one_queue_one_name"})
PICKED_ONLY = "  AND cairnq_tasks.id IN (SELECT value FROM json_each(%(picked)s))"


@lru_cache(maxsize=None)
def step_sql(name: str) -> str:
    """Return the SQLite text of large-row step ``name``."""
    base, _, kind = name.rpartition("_")
    if kind == "write" and base in DERIVED_WRITES:
        return _without_returning(base)
    if kind == "pick" and base in CLAIM_SHAPES:
        return _claim_selection(base)
    if name == "claim_write":
        return _lease_without_returning()
    return statement("sqlite", f"large_rows/{name}")


def _without_returning(name: str) -> str:
    lines = statement("sqlite", name).splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("RETURNING"))
    note = f"-- Large-row mode: {name}.sql without RETURNING, restricted to the picked ids."
    return "\n".join([note, *lines[:end], PICKED_ONLY]) + "\n"


def _lease_without_returning() -> str:
    # claim_picked.sql already leases exactly the picked ids; only its RETURNING goes.
    lines = statement("sqlite", "claim_picked").splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("RETURNING"))
    note = "-- Large-row mode, claim step 2 of 3 (write): claim_picked.sql without RETURNING."
    return "\n".join([note, *lines[1:end]]) + "\n"


def _claim_selection(name: str) -> str:
    lines = statement("sqlite", name).splitlines()
    start = lines.index("WHERE id IN (") + 1
    end = lines.index(")", start)
    note = f"-- Large-row mode: the selection of {name}.sql, the ids it would lease."
    return "\n".join([note, *(line[4:] for line in lines[start:end])]) + "\n"
