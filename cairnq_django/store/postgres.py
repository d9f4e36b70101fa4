"""The PostgreSQL store: the database supplies every timestamp (protocol 2.1).

Lists bind as text arrays, booleans natively. Contention needs no retry loop
here: claims, recovery and purge skip locked rows, keyed operations queue on
the shared advisory lock, and everything else is one short statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._common import SQLStore


class PostgresStore(SQLStore):
    """Every protocol operation on a Django PostgreSQL connection."""

    dialect = "postgres"

    def _list(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    def _bool(self, value: bool) -> bool:
        return bool(value)

    def _clock(self) -> dict[str, Any]:
        return {}

    def _claim_commit(self, relaxed: bool) -> dict[str, Any]:
        # None keeps the session's own setting (set_config with its current value).
        return {"synchronous_commit": "off" if relaxed else None}

    def _complete_many_params(self, items: list[tuple[str, str | None]]) -> dict[str, Any]:
        return {"ids": [i for i, _ in items], "results": [r for _, r in items]}

    def _fail_many_params(self, items: list[tuple[str, str, bool, int]]) -> dict[str, Any]:
        return {
            "ids": [item[0] for item in items],
            "errors": [item[1] for item in items],
            "retryable": [item[2] for item in items],
            "delays": [item[3] for item in items],
        }
