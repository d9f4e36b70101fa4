"""System checks for the ``CAIRNQ`` settings and the queue database (see docs/checks.md).

Each misconfiguration has a stable id and a hint. The checks read settings
only; they never open a database connection (CONVENTIONS 7), so they are safe
in ``manage.py check`` on a machine without the database.

Ids used here: cairnq.E001-E004, W005, E006-E009, E011-E015. ``cairnq.W010`` (a task naming an
undeclared resource) is registered by the worker's own check module.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db.utils import load_backend

from .protocol import bounds
from .client.backpressure import limit_problems
from .conf import DEFAULTS
from .store.sqlite.connection import WRITE_LOCK_MODES, chosen_transaction_mode

SUPPORTED_VENDORS = ("sqlite", "postgresql")

# Integer settings: (key, allowed range, None allowed). The ranges are the
# worker flags' (bounds), so a setting and its flag accept the same values.
_NUMBERS: tuple[tuple[str, bounds.IntRange, bool], ...] = (
    ("CONCURRENCY", bounds.CONCURRENCY, False),
    ("LEASE_MS", bounds.LEASE_MS, False),
    ("HEARTBEAT_INTERVAL_MS", bounds.TIMER_MS, True),
    ("POLL_INTERVAL_MS", bounds.TIMER_MS, False),
    ("MAX_RUN_MS", bounds.TIMER_MS, True),
    ("CLAIM_BATCH", bounds.COUNT, True),
    ("MAX_IN_FLIGHT_BYTES", bounds.BIG_COUNT, True),
    ("MAX_PAYLOAD_BYTES", bounds.BIG_COUNT, True),
    ("RETRY_BACKOFF_MS", bounds.BACKOFF_MS, False),
    ("RETRY_BACKOFF_MAX_MS", bounds.BACKOFF_MS, False),
    ("MAX_QUEUE_WAIT_MS", bounds.WAIT_MS, False),
    ("SQLITE_BUSY_TIMEOUT_MS", bounds.WAIT_MS, False),
    ("RETENTION_INTERVAL_MS", bounds.TIMER_MS, False),
    ("UNSERVED_CHECK_INTERVAL_MS", bounds.TIMER_MS, True),
)


def _user_settings() -> Any:
    return getattr(settings, "CAIRNQ", None) or {}


def _config(user: Mapping[str, Any]) -> dict[str, Any]:
    # Built here rather than through get_config() so a malformed CAIRNQ is
    # reported instead of crashing the check run.
    config = dict(DEFAULTS)
    config.update(user)
    return config


@checks.register("cairnq")
def check_configuration(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Run every cairnq settings check."""
    user = _user_settings()
    if not isinstance(user, Mapping):
        return [
            checks.Error(
                f"settings.CAIRNQ must be a dict, not {type(user).__name__}.",
                hint='Write it as CAIRNQ = {"LEASE_MS": 30_000, ...}.',
                id="cairnq.E012",
            )
        ]
    config = _config(user)
    messages: list[checks.CheckMessage] = []
    messages += _check_unknown_keys(user)
    messages += _check_database(config)
    messages += _check_numbers(config)
    messages += _check_lease(config)
    messages += _check_resources(config)
    messages += _check_queue_depth(config)
    messages += _check_queues(config)
    messages += _check_schedule()
    messages += _check_retention(config)
    messages += _check_unknown_tasks(config)
    return messages


def _check_unknown_tasks(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    from .tasks.unknown import MODES

    messages: list[checks.CheckMessage] = []
    mode = config.get("UNKNOWN_TASKS")
    if mode not in MODES:
        messages.append(
            checks.Error(
                f'CAIRNQ["UNKNOWN_TASKS"] must be one of {", ".join(map(repr, MODES))}, got {mode!r}.',
                hint='"raise" (the default) suits a project whose own workers run every task; see docs/tasks.md.',
                id="cairnq.E015",
            )
        )
    foreign = config.get("FOREIGN_TASKS")
    if not isinstance(foreign, (list, tuple)) or not all(isinstance(p, str) and p for p in foreign):
        messages.append(
            checks.Error(
                f'CAIRNQ["FOREIGN_TASKS"] must be a list of task names or patterns, got {foreign!r}.',
                hint='For example ["report.build", "ts.*"]: names that other SDKs\' workers run.',
                id="cairnq.E015",
            )
        )
    return messages


def _check_schedule() -> list[checks.CheckMessage]:
    from .tasks.periodic import schedule_errors

    return [
        checks.Error(
            message,
            hint='Write each entry as "task.name": "<minute> <hour> <day> <month> <weekday>"; see docs/periodic.md.',
            id="cairnq.E013",
        )
        for message in schedule_errors()
    ]


def _check_retention(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    from .client.retention import parse_rules

    try:
        parse_rules(config["RETENTION"])
    except ImproperlyConfigured as exc:
        return [
            checks.Error(
                str(exc),
                hint="Use None, a cutoff in ms for every terminal status, or {status: cutoff_ms}; see docs/admin.md.",
                id="cairnq.E014",
            )
        ]
    return []


def _check_unknown_keys(user: Mapping[str, Any]) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    for key in sorted(str(k) for k in user if k not in DEFAULTS):
        close = difflib.get_close_matches(key, list(DEFAULTS), n=1)
        hint = (
            f'Did you mean "{close[0]}"?'
            if close
            else "Remove it; docs/configuration.md lists every key."
        )
        messages.append(
            checks.Error(
                f'CAIRNQ has an unknown key "{key}"; it is ignored.',
                hint=hint,
                id="cairnq.E008",
            )
        )
    return messages


def _vendor_of(engine: str) -> str:
    """Return the backend's vendor without connecting (``unknown`` if it will not load)."""
    try:
        return str(load_backend(engine).DatabaseWrapper.vendor)
    except Exception:
        # The backend could not even be imported (often: its driver is missing).
        # Guess from the dotted path so the driver check below can say why.
        lowered = engine.lower()
        if "postg" in lowered:
            return "postgresql"
        if "sqlite" in lowered:
            return "sqlite"
        return "unknown"


def _psycopg_installed() -> bool:
    try:
        importlib.import_module("psycopg")
    except ImportError:
        return False
    return True


def _check_database(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    alias = config["DATABASE"]
    databases = getattr(settings, "DATABASES", {}) or {}
    if not isinstance(alias, str) or alias not in databases:
        known = ", ".join(sorted(databases)) or "none"
        return [
            checks.Error(
                f'CAIRNQ["DATABASE"] names the database alias {alias!r}, '
                "which is not in settings.DATABASES.",
                hint=f"Use one of: {known}.",
                id="cairnq.E001",
            )
        ]
    db = databases[alias]
    engine = str(db.get("ENGINE") or "django.db.backends.dummy")
    vendor = _vendor_of(engine)
    if vendor not in SUPPORTED_VENDORS:
        return [
            checks.Error(
                f"Database {alias!r} uses {engine} (vendor {vendor!r}); "
                "cairnq_django supports only SQLite and PostgreSQL.",
                hint='Point CAIRNQ["DATABASE"] at a SQLite or PostgreSQL alias.',
                id="cairnq.E002",
            )
        ]
    if vendor == "postgresql" and not _psycopg_installed():
        return [
            checks.Error(
                f"Database {alias!r} is PostgreSQL but psycopg (version 3) is not installed.",
                hint='Install it: pip install "cairnq-django[postgres]" (psycopg[binary]).',
                id="cairnq.E003",
            )
        ]
    if vendor == "sqlite":
        mode = chosen_transaction_mode(db)
        # Unset: the app opens IMMEDIATE itself (sqlite_connection.py). EXCLUSIVE
        # also takes the write lock at BEGIN (and equals IMMEDIATE in WAL mode).
        if mode is not None and (not isinstance(mode, str) or mode.upper() not in WRITE_LOCK_MODES):
            return [
                checks.Warning(
                    f"SQLite database {alias!r} opens write transactions with "
                    f"BEGIN {str(mode).upper()}, not BEGIN IMMEDIATE.",
                    hint=(
                        f'Remove "transaction_mode" from DATABASES["{alias}"]["OPTIONS"] '
                        '(cairnq then opens IMMEDIATE itself) or set it to "IMMEDIATE". '
                        "In this mode a transaction that reads before it writes (a keyed "
                        "submit inside atomic()) fails at once with 'database is locked' "
                        "under concurrency instead of waiting."
                    ),
                    id="cairnq.W005",
                )
            ]
    return []


def _check_numbers(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    problems: list[tuple[str, str]] = []
    for key, allowed, nullable in _NUMBERS:
        value: Any = config.get(key)
        if value is None and nullable:
            continue
        problem = allowed.problem(value)
        if problem is not None:
            problems.append((key, f"{problem} (or None)" if nullable else problem))
    drain = bounds.seconds_problem(config.get("DRAIN_TIMEOUT"))
    if drain is not None:
        problems.append(("DRAIN_TIMEOUT", drain))
    return [
        checks.Error(
            f'CAIRNQ["{key}"] {problem}.',
            hint=f"The default is {DEFAULTS[key]!r}; docs/configuration.md explains it.",
            id="cairnq.E006",
        )
        for key, problem in problems
    ]


def effective_heartbeat_ms(config: Mapping[str, Any]) -> int:
    """Return the heartbeat interval a worker uses: the setting, or max(50, lease // 3)."""
    explicit = config.get("HEARTBEAT_INTERVAL_MS")
    if explicit is not None:
        return int(explicit)
    return max(bounds.MIN_BEAT_MS, int(config["LEASE_MS"]) // 3)


def _check_lease(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    lease: Any = config.get("LEASE_MS")
    beat: Any = config.get("HEARTBEAT_INTERVAL_MS")
    if bounds.LEASE_MS.problem(lease) is not None:
        return []  # reported by E006
    if beat is not None and bounds.TIMER_MS.problem(beat) is not None:
        return []  # reported by E006
    heartbeat = effective_heartbeat_ms(config)
    # Three beats per lease leave two to miss (a slow query, a GC pause) before
    # another worker may take the task over. The protocol's default interval
    # (lease // 3) is exactly on that line, so "shorter than" is the test.
    if lease < 3 * heartbeat:
        return [
            checks.Error(
                f'CAIRNQ["LEASE_MS"] ({lease}) is shorter than three heartbeats '
                f"of {heartbeat} ms.",
                hint=(
                    f"Raise LEASE_MS to at least {3 * heartbeat} or lower "
                    f"HEARTBEAT_INTERVAL_MS to at most {lease // 3}."
                ),
                id="cairnq.E004",
            )
        ]
    return []


def _check_resources(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    resources: Any = config.get("RESOURCES")
    if not isinstance(resources, Mapping):
        return [
            checks.Error(
                f'CAIRNQ["RESOURCES"] must be a dict of name to capacity, got {resources!r}.',
                hint='For example {"gpu": 1}.',
                id="cairnq.E007",
            )
        ]
    messages: list[checks.CheckMessage] = []
    for name, capacity in resources.items():
        if bounds.text_problem(name) is not None:
            messages.append(
                checks.Error(
                    f'CAIRNQ["RESOURCES"] has a resource name {name!r} that is not a non-empty string '
                    "either database can store.",
                    hint="Name resources with strings, as @task(resource=...) does.",
                    id="cairnq.E007",
                )
            )
        elif bounds.COUNT.problem(capacity) is not None:
            messages.append(
                checks.Error(
                    f'CAIRNQ["RESOURCES"]["{name}"] {bounds.COUNT.problem(capacity)}.',
                    hint="A capacity is how many calls may hold the resource at once.",
                    id="cairnq.E007",
                )
            )
    return messages


def _check_queue_depth(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    return [
        checks.Error(
            f'CAIRNQ["MAX_QUEUE_DEPTH"] {problem}.',
            hint="Use None (no gate), an int >= 1 for every queue, or {queue: int >= 1}.",
            id="cairnq.E009",
        )
        for problem in limit_problems(config.get("MAX_QUEUE_DEPTH"))
    ]


def _check_queues(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    queues = config.get("QUEUES")
    if (
        isinstance(queues, (list, tuple))
        and queues
        and all(bounds.text_problem(q) is None for q in queues)
    ):
        return []
    return [
        checks.Error(
            f'CAIRNQ["QUEUES"] must be a non-empty list of queue names submit accepts, got {queues!r}.',
            hint='For example ["default"]; a name is non-empty text without NUL, at most 1024 bytes of UTF-8.',
            id="cairnq.E011",
        )
    ]
