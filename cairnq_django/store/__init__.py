"""Choose the store for a database alias: ``get_store()``.

One store per alias per process; stores hold no connection of their own (each
call uses ``django.db.connections[alias]`` of the calling thread), so sharing
them between threads is safe.
"""

from __future__ import annotations

import threading

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.connection import ConnectionDoesNotExist

from ..conf import get_config
from .base import ClaimHooks, ClaimProbe, ClaimRequest, Draw, Failure, QueueOverview, Store, SubmitSpec

__all__ = [
    "ClaimHooks", "ClaimProbe", "ClaimRequest", "Draw", "Failure", "QueueOverview", "Store", "SubmitSpec",
    "clear_store_cache", "get_store",
]

_stores: dict[str, Store] = {}
_lock = threading.Lock()


def get_store(alias: str | None = None) -> Store:
    """Return the store for ``alias`` (default ``CAIRNQ["DATABASE"]``), cached per alias.

    Raise ``ImproperlyConfigured`` for an unknown alias or a database vendor
    other than SQLite and PostgreSQL.
    """
    name = alias or get_config()["DATABASE"]
    store = _stores.get(name)
    if store is not None:
        return store
    try:
        vendor = connections[name].vendor
    except ConnectionDoesNotExist as exc:
        raise ImproperlyConfigured(f"cairnq: database alias {name!r} is not in DATABASES") from exc
    if vendor == "postgresql":
        # Needs psycopg (optional) and the models; this package loads with cairnq_django, before the app registry.
        from .postgres.store import PostgresStore

        store = PostgresStore(name)
    elif vendor == "sqlite":
        # Imports the models; this package loads with cairnq_django, before the app registry is ready.
        from .sqlite.store import SQLiteStore

        store = SQLiteStore(name)
    else:
        raise ImproperlyConfigured(
            f"cairnq: database alias {name!r} uses {vendor!r}; only SQLite and PostgreSQL are supported"
        )
    with _lock:
        return _stores.setdefault(name, store)


def clear_store_cache() -> None:
    """Forget every cached store (after DATABASES changes, e.g. in tests)."""
    with _lock:
        _stores.clear()
