"""The ``CAIRNQ`` settings: their defaults, the effective dict, and the rule each must satisfy."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from .protocol import bounds

if TYPE_CHECKING:
    from .tasks.registry import TaskDefinition


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, not a container's CPU quota)."""
    count = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if count is not None:
        return int(count() or 1)
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on macOS and Windows
        return os.cpu_count() or 1


def default_concurrency() -> int:
    """``CONCURRENCY``'s default: one handler call per usable CPU, as Celery and
    django-q2 size their pools, but at least 2, so one long call does not hold
    every other task back (docs/worker.md#concurrency)."""
    return min(max(2, usable_cpus()), bounds.MAX_CONCURRENCY)


# Every key a project may set in ``settings.CAIRNQ``; docs/configuration.md lists each.
DEFAULTS: dict[str, Any] = {
    # Database alias holding the cairnq tables.
    "DATABASE": "default",
    # Queues a worker claims from when ``--queue`` is not given.
    "QUEUES": ["default"],
    # Handler calls in flight per worker process: the usable CPUs, at least 2.
    "CONCURRENCY": default_concurrency(),
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
    # Calls a worker may claim beyond its free slots, to run as slots free:
    # 0 means none (docs/worker.md#claiming-ahead).
    "CLAIM_AHEAD": "auto",
    # Payload byte budget for calls in flight; None means no budget.
    "MAX_IN_FLIGHT_BYTES": None,
    # Largest payload submit accepts (UTF-8 bytes of its JSON); None means no limit.
    "MAX_PAYLOAD_BYTES": 1_048_576,
    # Exponential backoff with equal jitter for retryable failures.
    "RETRY_BACKOFF_MS": 1_000,
    "RETRY_BACKOFF_MAX_MS": 30_000,
    # Named capacities handlers may join with ``@task(resource=...)``.
    "RESOURCES": {},
    # Capacities shared by the whole fleet: at most N calls holding the
    # resource across every worker and host (docs/limits.md).
    "GLOBAL_RESOURCES": {},
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
    # are untouched). None means on, except under TRANSACTION_POOLING: a
    # pooler that hands each transaction another server connection cannot
    # keep them (PgBouncer before 1.21, or without max_prepared_statements).
    "PREPARED_STATEMENTS": None,
    # PostgreSQL behind a pooler in transaction mode (PgBouncer's
    # pool_mode = transaction): nothing cairnq sends relies on its session
    # (docs/deployment.md#connection-poolers).
    "TRANSACTION_POOLING": False,
    # A DATABASES alias with a direct (unpooled) connection to the queue
    # database for the worker's LISTEN; None means the queue alias itself,
    # or polling under TRANSACTION_POOLING.
    "LISTEN_DATABASE": None,
    # How long SQLite writers wait out "database is locked" before raising.
    "SQLITE_BUSY_TIMEOUT_MS": 5_000,
    # Retention swept by running workers: None, an int cutoff, or {status: cutoff_ms}.
    "RETENTION": None,
    "RETENTION_INTERVAL_MS": 3_600_000,
    # How long workers keep the dashboard's per-minute history; None keeps it forever.
    "HISTORY_KEEP_MS": 7 * 86_400_000,
    # How often a worker looks for queued tasks in its queues that none of its
    # handlers serves, and warns once per name; None turns the check off.
    "UNSERVED_CHECK_INTERVAL_MS": 60_000,
    # How long a stopped or lost worker's registry row is kept after it was last seen.
    "WORKER_KEEP_MS": 86_400_000,
    # A submit naming a task no installed app declares: "raise" UnknownTask,
    # "warn" (UnknownTaskWarning, then enqueue) or "allow".
    "UNKNOWN_TASKS": "raise",
    # Names (or shell-style patterns) other SDKs' workers run: always allowed.
    "FOREIGN_TASKS": [],
    # Periodic schedule: {"name": "cron expression"} (see docs/periodic.md).
    "SCHEDULE": {},
    # Bearer token the metrics view accepts besides a staff login (docs/metrics.md).
    "METRICS_TOKEN": None,
    # Address a worker's metrics endpoint listens on (cairnq_worker --metrics-port):
    # this host only unless set otherwise, since the endpoint has no authentication.
    "METRICS_HOST": "127.0.0.1",
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


# ---- the rules each setting must satisfy ------------------------------------
# Defined once here: the system checks (checks.py) report them with an id and a
# hint, the worker command applies them to its flags and to the settings it
# falls back on, and the worker refuses to start on them. Each answers "what
# is wrong" as a phrase ("must be ..."), or None when the value is fine.

# Integer settings: (allowed range, None allowed). A flag of the worker command
# that stands for one of these parses with the same range.
NUMBERS: dict[str, tuple[bounds.IntRange, bool]] = {
    "CONCURRENCY": (bounds.CONCURRENCY, False),
    "LEASE_MS": (bounds.LEASE_MS, False),
    "HEARTBEAT_INTERVAL_MS": (bounds.TIMER_MS, True),
    "POLL_INTERVAL_MS": (bounds.TIMER_MS, False),
    "MAX_RUN_MS": (bounds.TIMER_MS, True),
    "CLAIM_BATCH": (bounds.COUNT, True),
    "CLAIM_AHEAD": (bounds.CLAIM_AHEAD, False),
    "MAX_IN_FLIGHT_BYTES": (bounds.BIG_COUNT, True),
    "MAX_PAYLOAD_BYTES": (bounds.BIG_COUNT, True),
    "RETRY_BACKOFF_MS": (bounds.BACKOFF_MS, False),
    "RETRY_BACKOFF_MAX_MS": (bounds.BACKOFF_MS, False),
    "MAX_QUEUE_WAIT_MS": (bounds.WAIT_MS, False),
    "SQLITE_BUSY_TIMEOUT_MS": (bounds.WAIT_MS, False),
    "RETENTION_INTERVAL_MS": (bounds.TIMER_MS, False),
    "UNSERVED_CHECK_INTERVAL_MS": (bounds.TIMER_MS, True),
    "WORKER_KEEP_MS": (bounds.KEEP_MS, False),
    "HISTORY_KEEP_MS": (bounds.AGE_MS, True),
}


# Integer settings that also take "auto" (the worker decides as it runs).
AUTO_NUMBERS = frozenset({"CLAIM_AHEAD"})


def number_problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` for integer setting ``key`` (None, or "auto", is fine where allowed)."""
    allowed, nullable = NUMBERS[key]
    if value is None and nullable:
        return None
    if key in AUTO_NUMBERS and value == "auto":
        return None
    problem = allowed.problem(value)
    if problem is not None and key in AUTO_NUMBERS:
        return f'{problem} (or "auto")'
    return f"{problem} (or None)" if problem is not None and nullable else problem


def drain_timeout_problem(value: Any) -> str | None:
    """``DRAIN_TIMEOUT``: a finite number of seconds."""
    return bounds.seconds_problem(value)


def async_claim_commit_problem(value: Any) -> str | None:
    """``ASYNC_CLAIM_COMMIT``: True or False."""
    return flag_problem(value)


def flag_problem(value: Any) -> str | None:
    """A True/False setting (``TRANSACTION_POOLING``)."""
    return None if isinstance(value, bool) else f"must be True or False, got {value!r}"


def prepared_statements_problem(value: Any) -> str | None:
    """``PREPARED_STATEMENTS``: True, False, or None (on unless TRANSACTION_POOLING)."""
    return None if value is None or isinstance(value, bool) else f"must be True, False or None, got {value!r}"


def listen_database_problem(value: Any, databases: Mapping[str, Any], vendor_of: Any) -> str | None:
    """``LISTEN_DATABASE``: None or a PostgreSQL alias of ``databases`` (``vendor_of(ENGINE)`` names its vendor)."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in databases:
        known = ", ".join(sorted(databases)) or "none"
        return f"names {value!r}, which is not an alias of settings.DATABASES (aliases: {known})"
    engine = str(databases[value].get("ENGINE") or "")
    if vendor_of(engine) != "postgresql":
        return f"names {value!r}, which is not a PostgreSQL database ({engine or 'no ENGINE'})"
    return None


def prepared_statements(config: Mapping[str, Any]) -> bool:
    """Whether the store prepares its PostgreSQL statements: the setting, or None = not under pooling."""
    explicit = config.get("PREPARED_STATEMENTS")
    if explicit is None:
        return not config.get("TRANSACTION_POOLING")
    return bool(explicit)


def listen_alias(config: Mapping[str, Any]) -> str | None:
    """The alias a PostgreSQL worker LISTENs over, or None when it polls instead.

    LISTEN holds a session, which a transaction pooler does not keep: under
    TRANSACTION_POOLING only a LISTEN_DATABASE (a direct connection) serves.
    """
    if config.get("LISTEN_DATABASE"):
        return str(config["LISTEN_DATABASE"])
    if config.get("TRANSACTION_POOLING"):
        return None
    return str(config["DATABASE"])


# A token shorter than this is guessable enough to be refused (cairnq.E019).
MIN_METRICS_TOKEN_CHARS = 16


def metrics_token_problem(token: Any) -> str | None:
    """``METRICS_TOKEN``: None (no token access), or text of at least 16 characters that is no repetition.

    The one rule for check ``cairnq.E019`` and the metrics view, which
    refuses to serve with a token it breaks (a WSGI server runs no checks).
    """
    if token is None:
        return None
    if not isinstance(token, str):
        return f"must be a string or None, got {type(token).__name__}"
    if len(token.strip()) < MIN_METRICS_TOKEN_CHARS or token != token.strip():
        return f"must be at least {MIN_METRICS_TOKEN_CHARS} characters with no surrounding space, got {len(token)}"
    # A string is some shorter string repeated exactly when it occurs in itself
    # doubled other than at either end ("aaaa...", "passwordpassword").
    if token in (token + token)[1:-1]:
        return "must not be one character or one string repeated"
    return None


def metrics_host_problem(host: Any) -> str | None:
    """``METRICS_HOST`` (or ``--metrics-host``): a host name or address to listen on."""
    if not isinstance(host, str) or not host.strip() or host != host.strip() or "\x00" in host:
        return f"must be a host name or address, got {host!r}"
    return None


def queues_problem(queues: Any) -> str | None:
    """``QUEUES`` (or ``--queue``): a non-empty list of names submit accepts."""
    if (
        isinstance(queues, (list, tuple))
        and queues
        and all(bounds.text_problem(queue) is None for queue in queues)
    ):
        return None
    return f"must be a non-empty list of queue names submit accepts, got {queues!r}"


def capacity_problem(capacity: Any) -> str | None:
    """A resource's capacity: how many calls may hold it at once (an int >= 1)."""
    return bounds.COUNT.problem(capacity)


def resources_problems(resources: Any) -> list[tuple[str, str]]:
    """``RESOURCES`` or ``GLOBAL_RESOURCES``: a dict of name to capacity. One (kind, text) per fault.

    kind is "type", "name" or "capacity"; text follows ``CAIRNQ["RESOURCES"]``
    ("must be a dict ...", "has a resource name ...", ``["gpu"] must be ...``).
    """
    if not isinstance(resources, Mapping):
        return [("type", f" must be a dict of name to capacity, got {resources!r}")]
    problems: list[tuple[str, str]] = []
    for name, capacity in resources.items():
        if bounds.text_problem(name) is not None:
            problems.append(
                ("name", f" has a resource name {name!r} that is not a non-empty string either database can store")
            )
        elif (problem := capacity_problem(capacity)) is not None:
            problems.append(("capacity", f'["{name}"] {problem}'))
    return problems


def effective_heartbeat_ms(config: Mapping[str, Any]) -> int:
    """Return the heartbeat interval a worker uses: the setting, or max(50, lease // 3)."""
    explicit = config.get("HEARTBEAT_INTERVAL_MS")
    if explicit is not None:
        return int(explicit)
    return max(bounds.MIN_BEAT_MS, int(config["LEASE_MS"]) // 3)


def undeclared_resources(
    resources: Mapping[str, Any], definitions: Iterable[TaskDefinition], global_resources: Mapping[str, Any] | None = None
) -> list[str]:
    """One message per task among ``definitions`` naming a resource neither mapping declares."""
    resources = {**(global_resources or {}), **resources}
    declared = ", ".join(sorted(map(str, resources))) or "none"
    return [
        f"task {definition.name!r} uses resource {definition.resource!r}, which is not declared; "
        f"declared resources: {declared}"
        for definition in definitions
        if definition.resource is not None and definition.resource not in resources
    ]
