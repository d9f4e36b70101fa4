"""System checks for the ``CAIRNQ`` settings and the queue database (see docs/checks.md).

Each misconfiguration has a stable id and a hint. The checks read settings
only; they never open a database connection, so they are safe
in ``manage.py check`` on a machine without the database. The one exception
is tagged ``database`` and runs only when asked to connect (``check
--database``, and ``migrate`` for the database it migrates): E024/E025, a
transaction pooler in front of the queue database or the LISTEN alias.

Ids used here: cairnq.E001-E004, W005, E006-E009, W010, E011-E017, I018, E019, W022,
E023-E025 (E020, E021 and W020 are the django.tasks backend's). The rules
themselves live in ``conf`` (and ``protocol.bounds``), shared with the worker
command and the worker; this module gives each fault its id and hint.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Collection, Mapping
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db.utils import load_backend
from django.utils.module_loading import module_has_submodule

from . import conf
from .client.backpressure import limit_problems
from .client.retention import parse_rules
from .conf import DEFAULTS, get_config
from .protocol import bounds
from .store.postgres import pooler
from .store.sqlite.connection import WRITE_LOCK_MODES, chosen_transaction_mode
from .tasks.periodic import schedule_errors
from .tasks.registry import registered
from .tasks.unknown import MODES

SUPPORTED_VENDORS = ("sqlite", "postgresql")


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
    messages += _check_pooling(config)
    messages += _check_metrics_token(config)
    messages += _check_metrics_host(config)
    messages += _check_handlers(config)
    return messages


def _check_pooling(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    """``cairnq.E017`` for a malformed pooling setting; ``cairnq.I018``: what applies under pooling."""
    databases = getattr(settings, "DATABASES", {}) or {}
    problems = [
        ("TRANSACTION_POOLING", conf.flag_problem(config.get("TRANSACTION_POOLING"))),
        ("PREPARED_STATEMENTS", conf.prepared_statements_problem(config.get("PREPARED_STATEMENTS"))),
        ("LISTEN_DATABASE", conf.listen_database_problem(config.get("LISTEN_DATABASE"), databases, _vendor_of)),
    ]
    errors: list[checks.CheckMessage] = [
        checks.Error(
            f'CAIRNQ["{key}"] {problem}.',
            hint="See docs/deployment.md#connection-poolers.",
            id="cairnq.E017",
        )
        for key, problem in problems
        if problem is not None
    ]
    alias = config.get("DATABASE")
    queue_db = databases.get(alias) if isinstance(alias, str) else None
    if errors or config["TRANSACTION_POOLING"] is not True or queue_db is None:
        return errors
    if _vendor_of(str(queue_db.get("ENGINE") or "")) != "postgresql":
        return []
    listen = conf.listen_alias(config)
    wakeups = (
        f'workers LISTEN for new tasks over the direct connection {listen!r} (LISTEN_DATABASE)'
        if listen is not None
        else f'workers poll for new tasks every {config["POLL_INTERVAL_MS"]} ms (no LISTEN_DATABASE)'
    )
    prepared = (
        "client calls prepare their statements as set (the pooler must keep them: PgBouncer 1.21+ "
        "with max_prepared_statements), the worker's own never"
        if conf.prepared_statements(config)
        else "prepared statements are off"
    )
    return [
        checks.Info(
            f'CAIRNQ["TRANSACTION_POOLING"] is on: {wakeups}; {prepared}; '
            "the worker's statement and lock timeouts are set in each transaction.",
            hint=(
                'Set CAIRNQ["LISTEN_DATABASE"] to an alias with a direct connection for prompt pickup.'
                if listen is None
                else "docs/deployment.md#connection-poolers says what changes behind a pooler."
            ),
            id="cairnq.I018",
        )
    ]


@checks.register("cairnq", checks.Tags.database)
def check_transaction_pooler(
    app_configs: Any = None, databases: Collection[str] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """``cairnq.E024``/``E025``: a transaction pooler where the settings do not expect one.

    Connects, so only for the aliases Django names (``check --database``,
    ``migrate``). Naming the queue database also probes its LISTEN alias:
    the same database, reached another way.
    """
    user = _user_settings()
    if not databases or not isinstance(user, Mapping):
        return []
    config = _config(user)
    alias = config.get("DATABASE")
    listen = _pooling_settings_listen_alias(config)
    messages: list[checks.CheckMessage] = []
    if alias in databases:
        messages += [error for error in [queue_pooler_error(config)] if error is not None]
    if alias in databases or (listen is not None and listen in databases):
        messages += [error for error in [listen_pooler_error(config)] if error is not None]
    return messages


def _pooling_settings_listen_alias(config: Mapping[str, Any]) -> str | None:
    """The LISTEN alias of well-formed settings (None when polling, or when E001/E017 report them)."""
    return conf.listen_alias(config) if _pooling_settings_sound(config) else None


def _pooling_settings_sound(config: Mapping[str, Any]) -> bool:
    """True if the queue database is a PostgreSQL alias and the pooling settings are well formed.

    Otherwise E001, E002, E017 say what is wrong, and there is nothing to probe.
    """
    databases = getattr(settings, "DATABASES", {}) or {}
    alias = config.get("DATABASE")
    return (
        isinstance(alias, str)
        and alias in databases
        and _vendor_of(str(databases[alias].get("ENGINE") or "")) == "postgresql"
        and conf.flag_problem(config.get("TRANSACTION_POOLING")) is None
        and conf.listen_database_problem(config.get("LISTEN_DATABASE"), databases, _vendor_of) is None
    )


def queue_pooler_error(config: Mapping[str, Any]) -> checks.Error | None:
    """``cairnq.E024``: the queue database goes through a transaction pooler, TRANSACTION_POOLING is not True.

    Probes the queue database (store/postgres/pooler.py) unless the settings
    already say so. Said by ``check --database`` and by ``cairnq_worker``,
    which refuses to start on it.
    """
    if config.get("TRANSACTION_POOLING") is True or not _pooling_settings_sound(config):
        return None
    alias = str(config.get("DATABASE"))
    finding = pooler.detect(alias)
    if not finding.pooled:
        return None
    harm = ["the worker's statement and lock timeouts go as startup options, which a pooler refuses or drops"]
    if conf.prepared_statements(config):
        harm.insert(0, "cairnq's prepared statements fail on the next server connection "
                    """('prepared statement "_pg3_0" already exists')""")
    if conf.listen_alias(config) == alias:
        harm.append(
            "a worker would LISTEN through it, leaving a server connection that other clients get "
            "subscribed after the worker is gone"
        )
    return checks.Error(
        f"Database {alias!r} goes through a transaction pooler ({finding.evidence}), but "
        f'CAIRNQ["TRANSACTION_POOLING"] is not True: {"; ".join(harm)}.',
        hint=_pooler_settings_hint(config, finding),
        id="cairnq.E024",
    )


def _pooler_settings_hint(config: Mapping[str, Any], finding: pooler.Finding) -> str:
    """The exact settings to add for the pooled queue database ``finding.alias``."""
    alias = finding.alias
    databases = getattr(settings, "DATABASES", {}) or {}
    listen = config.get("LISTEN_DATABASE")
    if isinstance(listen, str) and listen != alias:
        cairnq = f'"TRANSACTION_POOLING": True, "LISTEN_DATABASE": "{listen}"'
        direct = f' (keep DATABASES["{listen}"] past the pooler: workers LISTEN there)'
    else:
        name = "direct" if "direct" not in databases else f"{alias}_direct"
        cairnq = f'"TRANSACTION_POOLING": True, "LISTEN_DATABASE": "{name}"'
        direct = (
            f' and DATABASES["{name}"] = {{**DATABASES["{alias}"], "HOST": "<PostgreSQL\'s own host>", '
            f'"PORT": {finding.server_port or 5432}}} (the same database past the pooler, where workers LISTEN; '
            "without LISTEN_DATABASE they poll every POLL_INTERVAL_MS instead)"
        )
    cursors = (
        ""
        if databases.get(alias, {}).get("DISABLE_SERVER_SIDE_CURSORS")
        else f' Django\'s own advice for a transaction pooler: DATABASES["{alias}"]["DISABLE_SERVER_SIDE_CURSORS"] '
        "= True (for .iterator())."
    )
    return (
        f"Add to your settings: CAIRNQ = {{..., {cairnq}}}{direct}.{cursors} "
        "See docs/deployment.md#connection-poolers."
    )


def listen_pooler_error(config: Mapping[str, Any]) -> checks.Error | None:
    """``cairnq.E025``: the alias workers LISTEN over goes through a transaction pooler.

    Probes the LISTEN alias, unless it is the queue database with pooling
    off (E024 covers that one). A worker that finds it so polls instead.
    """
    listen = _pooling_settings_listen_alias(config)
    if listen is None or (listen == config.get("DATABASE") and config.get("TRANSACTION_POOLING") is not True):
        return None
    finding = pooler.detect(listen)
    if not finding.pooled:
        return None
    return checks.Error(
        f'CAIRNQ["LISTEN_DATABASE"] {listen!r} goes through a transaction pooler ({finding.evidence}): '
        "LISTEN needs a session of its own, and through the pooler the server connection stays subscribed "
        "after the worker is gone (the pooler then warns at every NOTIFY). Workers poll instead.",
        hint=(
            f'Point DATABASES["{listen}"] past the pooler, at PostgreSQL itself (its port: '
            f"{finding.server_port or 5432}), or remove LISTEN_DATABASE (workers then poll every "
            "POLL_INTERVAL_MS). See docs/deployment.md#connection-poolers."
        ),
        id="cairnq.E025",
    )


def _check_metrics_token(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    problem = conf.metrics_token_problem(config.get("METRICS_TOKEN"))
    if problem is None:
        return []
    return [
        checks.Error(
            f'CAIRNQ["METRICS_TOKEN"] {problem}.',
            hint='Use None (staff logins only) or a long random string, e.g. from python -c "import secrets; '
            'print(secrets.token_urlsafe(32))", read from the environment.',
            id="cairnq.E019",
        )
    ]


def _check_metrics_host(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    problem = conf.metrics_host_problem(config.get("METRICS_HOST"))
    if problem is None:
        return []
    return [
        checks.Error(
            f'CAIRNQ["METRICS_HOST"] {problem}.',
            hint='"127.0.0.1" (the default) serves this host only; "0.0.0.0" every interface. See docs/metrics.md.',
            id="cairnq.E023",
        )
    ]


# Said by check cairnq.W022 and by cairnq_worker, which refuses to start on it.
NO_HANDLERS_HINT = (
    "A worker imports the tasks.py module of every app in INSTALLED_APPS: is the app that declares "
    "your tasks installed, and are they in its tasks.py? If every task is run by other SDKs' workers, "
    'list their names in CAIRNQ["FOREIGN_TASKS"]; a worker then runs for housekeeping alone.'
)


def no_handlers_problem(config: Mapping[str, Any]) -> str | None:
    """Why a worker of this project would have nothing to run, or None.

    None when an installed app declares a task, or when ``FOREIGN_TASKS``
    says other SDKs' workers run this project's tasks.
    """
    foreign = config.get("FOREIGN_TASKS")
    if registered() or (isinstance(foreign, (list, tuple)) and foreign):
        return None
    without = [
        app.label
        for app in apps.get_app_configs()
        if not app.name.startswith("django.")
        and app.name != __package__
        and not module_has_submodule(app.module, "tasks")
    ]
    where = (
        f"installed apps without a tasks module: {', '.join(without)}"
        if without
        else "every installed app's tasks module was imported and declared none"
    )
    return f"no installed app declares a task with @cairnq.task ({where}), so a worker has nothing to run"


def _check_handlers(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    problem = no_handlers_problem(config)
    if problem is None:
        return []
    return [checks.Warning(f"{problem}.", hint=NO_HANDLERS_HINT, id="cairnq.W022")]


def _check_unknown_tasks(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
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
    return [
        checks.Error(
            message,
            hint='Write each entry as "task.name": "<minute> <hour> <day> <month> <weekday>"; see docs/periodic.md.',
            id="cairnq.E013",
        )
        for message in schedule_errors()
    ]


def _check_retention(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
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
    for key in conf.NUMBERS:
        problem = conf.number_problem(key, config.get(key))
        if problem is not None:
            problems.append((key, problem))
    drain = conf.drain_timeout_problem(config.get("DRAIN_TIMEOUT"))
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


def _check_lease(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    lease: Any = config.get("LEASE_MS")
    beat: Any = config.get("HEARTBEAT_INTERVAL_MS")
    if conf.number_problem("LEASE_MS", lease) or conf.number_problem("HEARTBEAT_INTERVAL_MS", beat):
        return []  # reported by E006
    heartbeat = conf.effective_heartbeat_ms(config)
    # The protocol's default interval (lease // 3) is exactly on the floor, so
    # "shorter than" is the test.
    if lease < bounds.lease_floor_ms(beat):
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


_RESOURCE_HINTS = {
    "type": 'For example {"gpu": 1}.',
    "name": "Name resources with strings, as @task(resource=...) does.",
    "capacity": "A capacity is how many calls may hold the resource at once.",
}


def _check_resources(config: Mapping[str, Any]) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = [
        checks.Error(f'CAIRNQ["RESOURCES"]{text}.', hint=_RESOURCE_HINTS[kind], id="cairnq.E007")
        for kind, text in conf.resources_problems(config.get("RESOURCES"))
    ]
    return messages + [
        checks.Error(f'CAIRNQ["GLOBAL_RESOURCES"]{text}.', hint=_RESOURCE_HINTS[kind], id="cairnq.E016")
        for kind, text in conf.resources_problems(config.get("GLOBAL_RESOURCES"))
    ]


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
    problem = conf.queues_problem(config.get("QUEUES"))
    if problem is None:
        return []
    return [
        checks.Error(
            f'CAIRNQ["QUEUES"] {problem}.',
            hint='For example ["default"]; a name is non-empty text without NUL, at most 1024 bytes of UTF-8.',
            id="cairnq.E011",
        )
    ]


@checks.register("cairnq")
def check_task_resources(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``cairnq.W010``: a ``@task(resource=...)`` names a resource CAIRNQ["RESOURCES"] lacks.

    A warning, not an error: a host may declare it with ``cairnq_worker
    --resource NAME=N`` (docs/deployment.md), which ``check`` and ``migrate``
    cannot see. The worker itself still refuses to start while a resource it
    would need is declared neither way.
    """
    config = get_config()
    resources = config.get("RESOURCES") or {}
    global_resources = config.get("GLOBAL_RESOURCES") or {}
    if not isinstance(resources, dict) or not isinstance(global_resources, dict):
        return []  # check_configuration reports the wrong type (cairnq.E007, E016)
    return [
        checks.Warning(
            message,
            hint=(
                'Add it to CAIRNQ["RESOURCES"] (e.g. {"gpu": 1}) or CAIRNQ["GLOBAL_RESOURCES"] '
                "(a fleet-wide capacity), or start the worker with --resource NAME=N."
            ),
            id="cairnq.W010",
        )
        for message in conf.undeclared_resources(resources, registered().values(), global_resources)
    ]
