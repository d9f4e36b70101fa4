"""SQLite: the queue database opens its write transactions with ``BEGIN IMMEDIATE``.

Django begins SQLite transactions ``DEFERRED`` unless ``OPTIONS`` says
otherwise. A deferred transaction that reads before it writes (a keyed submit
inside the caller's ``atomic()``, a claim) asks for the write lock only at its
first write, and if another connection wrote meanwhile SQLite fails at once
with "database is locked" instead of waiting out the busy timeout. So when the
project gives the queue database no ``transaction_mode`` (Django's default
``startproject`` settings), each new connection of that alias is switched to
``IMMEDIATE`` as it opens. A mode the project chose is kept; check
``cairnq.W005`` warns about ``DEFERRED``.

The other two SQLite settings need nothing here: ``migrate`` switches the file
to WAL (it stays so), and Python's sqlite3 already waits 5 s on a locked
database unless ``OPTIONS["timeout"]`` says otherwise.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ...conf import get_config

WRITE_LOCK_MODES = ("IMMEDIATE", "EXCLUSIVE")


def chosen_transaction_mode(settings_dict: dict[str, Any]) -> Any:
    """The ``transaction_mode`` a database's ``OPTIONS`` give, or None."""
    options = settings_dict.get("OPTIONS") or {}
    return options.get("transaction_mode")


def open_immediate(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """``connection_created`` receiver: IMMEDIATE for the queue alias unless the project chose a mode."""
    if connection.vendor != "sqlite" or connection.alias != get_config()["DATABASE"]:
        return
    if chosen_transaction_mode(connection.settings_dict) is None:
        # Read by Django's SQLite backend at each BEGIN; reset at every reconnect,
        # which sends this signal again.
        connection.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]
