"""Settings with the queue in its own database: ``CAIRNQ["DATABASE"] = "queue"``.

``default`` holds the project's models (``DATABASE_URL``), ``queue`` holds the
cairnq tables (``QUEUE_DATABASE_URL``), and ``QueueRouter`` sends the
``cairnq`` app there for reads, writes and migrations -- so ``manage.py
migrate`` installs nothing cairnq in ``default`` and ``migrate --database
queue`` installs only cairnq in ``queue``. Used by tests/native/test_routing.py.
"""

from __future__ import annotations

from typing import Any

from .settings import *
from .settings import CAIRNQ, env

QUEUE_ALIAS = "queue"

DATABASES = {
    "default": env.db("DATABASE_URL"),
    QUEUE_ALIAS: env.db_url("QUEUE_DATABASE_URL"),
}
for _db in DATABASES.values():
    if _db["ENGINE"] == "django.db.backends.sqlite3":
        _db["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 5,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }

CAIRNQ = {**CAIRNQ, "DATABASE": QUEUE_ALIAS}
DATABASE_ROUTERS = ["testproject.settings_routing.QueueRouter"]


class QueueRouter:
    """Route the ``cairnq`` app to the queue database and everything else away from it."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return QUEUE_ALIAS if model._meta.app_label == "cairnq" else None

    db_for_write = db_for_read

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        if app_label == "cairnq":
            return db == QUEUE_ALIAS
        return db != QUEUE_ALIAS
