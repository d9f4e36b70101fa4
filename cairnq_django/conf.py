"""Read the ``CAIRNQ`` settings dict, filling in documented defaults."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

# Every key a project may set in ``settings.CAIRNQ``; docs/configuration.md lists each.
DEFAULTS: dict[str, Any] = {
    # Database alias holding the cairnq tables.
    "DATABASE": "default",
    # Queues a worker claims from when ``--queue`` is not given.
    "QUEUES": ["default"],
    # Handler calls in flight per worker process.
    "CONCURRENCY": 1,
    # Lease taken at claim and renewed by each heartbeat.
    "LEASE_MS": 30_000,
    # Beat interval; None means a third of the lease (never below 50 ms).
    "HEARTBEAT_INTERVAL_MS": None,
    # Idle sleep between empty polls (PostgreSQL also wakes on NOTIFY).
    "POLL_INTERVAL_MS": 500,
    # Wall-clock ceiling per handler call; None means unbounded.
    "MAX_RUN_MS": None,
    # Cap on rows one claim draw may request; None means no cap.
    "CLAIM_BATCH": None,
    # Payload byte budget for calls in flight; None means no budget.
    "MAX_IN_FLIGHT_BYTES": None,
    # Largest payload submit accepts (UTF-8 bytes of its JSON); None means no limit.
    "MAX_PAYLOAD_BYTES": 1_048_576,
    # Exponential backoff with equal jitter for retryable failures.
    "RETRY_BACKOFF_MS": 1_000,
    "RETRY_BACKOFF_MAX_MS": 30_000,
    # Named capacities handlers may join with ``@task(resource=...)``.
    "RESOURCES": {},
    # Seconds a stopping worker waits for calls in flight before handing them back.
    "DRAIN_TIMEOUT": 30.0,
    # Submit gate: an int for every queue or {queue: limit}; None disables it.
    "MAX_QUEUE_DEPTH": None,
    "MAX_QUEUE_WAIT_MS": 600_000,
    # PostgreSQL: a worker's claim commits without waiting for the WAL flush
    # (synchronous_commit=off for claim sessions only; see docs/performance-notes.md).
    "ASYNC_CLAIM_COMMIT": True,
    # PostgreSQL with psycopg 3: cairnq's own statements bind their parameters
    # on the server and are prepared once per connection (Django's ORM queries
    # are untouched). Turn off behind a pooler that cannot keep prepared
    # statements (PgBouncer before 1.21, or without max_prepared_statements).
    "PREPARED_STATEMENTS": True,
    # How long SQLite writers wait out "database is locked" before raising.
    "SQLITE_BUSY_TIMEOUT_MS": 5_000,
    # Retention swept by running workers: None, an int cutoff, or {status: cutoff_ms}.
    "RETENTION": None,
    "RETENTION_INTERVAL_MS": 3_600_000,
    # How often a worker looks for queued tasks in its queues that none of its
    # handlers serves, and warns once per name; None turns the check off.
    "UNSERVED_CHECK_INTERVAL_MS": 60_000,
    # A submit naming a task no installed app declares: "raise" UnknownTask,
    # "warn" (UnknownTaskWarning, then enqueue) or "allow".
    "UNKNOWN_TASKS": "raise",
    # Names (or shell-style patterns) other SDKs' workers run: always allowed.
    "FOREIGN_TASKS": [],
    # Periodic schedule: {"name": "cron expression"} (see docs/periodic.md).
    "SCHEDULE": {},
}


@lru_cache(maxsize=None)
def get_config() -> dict[str, Any]:
    """Return the effective settings: defaults overlaid with ``settings.CAIRNQ``."""
    user = getattr(settings, "CAIRNQ", None) or {}
    config = dict(DEFAULTS)
    # A CAIRNQ that is not a dict is reported by check cairnq.E012; until it
    # is fixed, run on the defaults rather than crash every management command.
    if isinstance(user, Mapping):
        config.update(user)
    return config


def unknown_keys() -> list[str]:
    """Return keys of ``settings.CAIRNQ`` that cairnq_django does not know."""
    user = getattr(settings, "CAIRNQ", None) or {}
    if not isinstance(user, Mapping):
        return []
    return sorted(key for key in user if key not in DEFAULTS)


@receiver(setting_changed)
def _clear_cache(*, setting: str, **kwargs: Any) -> None:
    if setting == "CAIRNQ":
        get_config.cache_clear()
