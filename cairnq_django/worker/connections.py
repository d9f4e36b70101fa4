"""Database connection care for the worker's threads, and the budget they keep (issue 21).

A worker process holds, of its own, whatever ``--concurrency`` is:

* the claim loop's connection (claims, periodic schedules, the hand-back at
  a drain timeout);
* ONE connection shared by the settler, the heartbeat (with the registry
  row), housekeeping (retention, pruning, the unserved-names check, the
  per-minute history flush) and the stop-time writes: ``SharedConnection``,
  each store call under one lock, so they take turns on it;
* on PostgreSQL with LISTEN, the listener's own connection (wakeups.py).

Handler threads use their own Django connection each (suffix ``:h``), for the
handler's code and for what the worker does on a handler's behalf there
(``ctx.progress``, ``ctx.heartbeat``, early settlement, child submits, large
payloads loaded before the call); so do the settler's and the heartbeat's
threads, for the signal receivers they call. On PostgreSQL the worker's connections are
tagged ``cairnq_worker:<worker_id>`` in ``application_name`` so operators and
fault tests can find them in ``pg_stat_activity``.

The worker's own connections also get statement and lock timeouts of one
lease: for the session when connected directly, or on every statement
behind a transaction pooler (``CAIRNQ["TRANSACTION_POOLING"]``), whose
sessions are not the worker's to set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections, connections

from ..conf import get_config
from ..store.postgres.transaction_timeouts import bound_each_transaction

logger = logging.getLogger("cairnq_django.worker")


def tag_thread(alias: str, application_name: str) -> None:
    """Make this thread's next PostgreSQL connection carry ``application_name``.

    The settings dict is shared by every thread's connection wrapper, so the
    wrapper of this thread gets its own copy with the name added.
    """
    _tag(connections[alias], application_name)


def _tag(wrapper: Any, application_name: str) -> None:
    if wrapper.vendor != "postgresql":
        return
    options = dict(wrapper.settings_dict.get("OPTIONS") or {})
    options["application_name"] = application_name[:63]
    if not application_name.endswith(":h"):
        if get_config()["TRANSACTION_POOLING"]:
            bound_each_transaction(wrapper, _bound_ms())
        else:
            options["options"] = _bounded(str(options.get("options") or ""))
    settings_dict = dict(wrapper.settings_dict)
    settings_dict["OPTIONS"] = options
    wrapper.settings_dict = settings_dict


def _bounded(libpq_options: str) -> str:
    """Add ``statement_timeout``/``lock_timeout`` of one lease unless the user set them.

    The worker's own connections (claim, heartbeat, settlement, retention; not
    handler threads) must not wait forever on a database that hangs -- a table
    lock held elsewhere, a stuck backend -- or the worker would stop answering
    SIGTERM. A statement that outlives a lease is pointless anyway: its lease
    is gone. Set either in ``DATABASES[...]["OPTIONS"]["options"]`` to override.
    """
    bound = _bound_ms()
    extra = [
        f"-c {name}={bound}"
        for name in ("statement_timeout", "lock_timeout")
        if name not in libpq_options
    ]
    return " ".join([libpq_options, *extra]).strip()


def _bound_ms() -> int:
    return max(1000, int(get_config()["LEASE_MS"]))


class SharedConnection:
    """One connection to ``alias`` that several worker threads take turns on.

    ``call`` runs a store call on it under ``lock``: for that call the calling
    thread's ``connections[alias]`` is the shared wrapper, and its own is put
    back afterwards (so the claim loop may call it too without losing its
    connection). A call that leaves the connection broken closes it; the next
    one reconnects.
    """

    def __init__(self, alias: str, application_name: str, lock: Any) -> None:
        self.alias = alias
        self.application_name = application_name
        # Reentrant where the callers nest (the settler's own write lock on SQLite).
        self.lock = lock
        self._wrapper: Any = None

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            if self._wrapper is None:
                wrapper = connections.create_connection(self.alias)
                _tag(wrapper, self.application_name)
                wrapper.inc_thread_sharing()
                self._wrapper = wrapper
            own = connections[self.alias]
            connections[self.alias] = self._wrapper
            try:
                drop_if_broken(self.alias)
                try:
                    return fn(*args, **kwargs)
                except BaseException:
                    drop_if_broken(self.alias)
                    raise
            finally:
                connections[self.alias] = own

    def close(self) -> None:
        """Close the shared connection (at the worker's stop)."""
        with self.lock:
            if self._wrapper is None:
                return
            own = connections[self.alias]
            connections[self.alias] = self._wrapper
            try:
                close_quietly(self.alias)
            finally:
                connections[self.alias] = own


class TakingTurns:
    """A store whose every call runs on a ``SharedConnection``; other attributes pass through."""

    def __init__(self, store: Any, shared: SharedConnection) -> None:
        self._store = store
        self._shared = shared

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if not callable(value):
            return value
        shared = self._shared

        def on_shared(*args: Any, **kwargs: Any) -> Any:
            return shared.call(value, *args, **kwargs)

        return on_shared


def budget(dialect: str, listens: bool, concurrency: int) -> str:
    """Say what connections the worker holds of its own, for the banner."""
    own = "2 (claim; settle + heartbeat + housekeeping)"
    if dialect == "postgres":
        own = own.replace("2 ", "2 pooled ", 1) + (" + 1 listen" if listens else " + 0 listen")
    return f"{own}; handler code adds its own, up to {concurrency}"


def drop_if_broken(alias: str) -> None:
    """Close this thread's connection if an error left it unusable.

    The long-lived worker threads keep their connection across iterations
    (reconnecting per poll would cap throughput); a connection that saw an
    error is checked and replaced, as ``close_old_connections`` does.
    """
    wrapper = connections[alias]
    if wrapper.connection is None:
        return
    if wrapper.errors_occurred or wrapper.needs_rollback:
        if wrapper.in_atomic_block:
            return
        try:
            usable = wrapper.is_usable()
        except Exception:  # noqa: BLE001
            usable = False
        if usable:
            wrapper.errors_occurred = False
        else:
            close_quietly(alias)


def close_quietly(alias: str) -> None:
    """Close this thread's connection, ignoring errors from an already-dead socket."""
    try:
        connections[alias].close()
    except Exception:  # noqa: BLE001
        # The wrapper may refuse to close mid-transaction or on a dead socket;
        # forget the raw connection so the next query reconnects.
        wrapper = connections[alias]
        wrapper.connection = None
        wrapper.in_atomic_block = False
        wrapper.needs_rollback = False


def handler_thread_reset() -> None:
    """Apply Django's request-style connection policy around a handler call."""
    close_old_connections()
