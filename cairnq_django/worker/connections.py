"""Per-thread database connection care for the worker's threads.

Each worker thread (claim loop, heartbeat, settler, handler threads) uses its
own Django connection. On PostgreSQL each is tagged with an
``application_name`` (``cairnq_worker:<worker_id>`` and a suffix per role) so
operators and fault tests can find them in ``pg_stat_activity``.

The worker's own connections also get statement and lock timeouts of one
lease: for the session when connected directly, or on every statement
behind a transaction pooler (``CAIRNQ["TRANSACTION_POOLING"]``), whose
sessions are not the worker's to set.
"""

from __future__ import annotations

import logging

from django.db import close_old_connections, connections

from ..conf import get_config
from ..store.postgres.transaction_timeouts import bound_each_transaction

logger = logging.getLogger("cairnq_django.worker")


def tag_thread(alias: str, application_name: str) -> None:
    """Make this thread's next PostgreSQL connection carry ``application_name``.

    The settings dict is shared by every thread's connection wrapper, so the
    wrapper of this thread gets its own copy with the name added.
    """
    wrapper = connections[alias]
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
