"""``manage.py cairnq_worker``: run a worker until signalled (see docs/worker.md).

Thin on purpose: parse and validate options (each flag falls back to its
``CAIRNQ`` key), check the schema is installed, build a ``Worker`` and run it.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import time
from typing import TYPE_CHECKING, Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, DatabaseError, OperationalError, connections
from django.db.migrations.executor import MigrationExecutor

from ...checks import NO_HANDLERS_HINT, no_handlers_problem, queue_pooler_error
from ...conf import (
    DEFAULTS,
    NUMBERS,
    async_claim_commit_problem,
    capacity_problem,
    drain_timeout_problem,
    get_config,
    metrics_host_problem,
    number_problem,
    queues_problem,
    resources_problems,
)
from ...protocol import bounds
from ...protocol.backoff import Backoff
from ...store import get_store
from ...tasks.registry import registered
from ...worker.loop import Worker
from ...worker.options import WorkerOptions
from ...worker.shutdown import two_phase_signals

if TYPE_CHECKING:
    from ...metrics.worker_endpoint import WorkerEndpoint

_MIGRATE_HINT = "run manage.py migrate cairnq"
# A database not reachable at start is retried after 0.5 s doubling to 5 s.
_START_RETRY_FIRST_S = 0.5
_START_RETRY_MAX_S = 5.0

# The worker's own handler, when the project logs "cairnq_django" nowhere.
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _whole(text: str) -> int | None:
    """``text`` as an int, or None; short, so a 5,000-digit flag is not parsed."""
    text = text.strip()
    if len(text) > 30:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _int(allowed: bounds.IntRange) -> Any:
    """An argparse type for an int in ``allowed`` (the range the API and checks use)."""

    def parse(text: str) -> int:
        value = _whole(text)
        problem = allowed.problem(text if value is None else value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        assert value is not None
        return value

    parse.__name__ = "integer"
    return parse


def _setting_int(key: str) -> Any:
    """The argparse type of the flag standing for integer setting ``key``: its range in ``conf``."""
    return _int(NUMBERS[key][0])


def _claim_ahead(text: str) -> int | str:
    """``--claim-ahead``: "auto", or a number of calls in CLAIM_AHEAD's range."""
    if text == "auto":
        return text
    try:
        value: int = _setting_int("CLAIM_AHEAD")(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f'{exc} (or "auto")') from None
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = None
    problem = drain_timeout_problem(text if value is None else value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    assert value is not None
    return value


def _queue(text: str) -> str:
    # What submit refuses (bounds.text_problem; undecodable bytes on the command
    # line arrive as a lone surrogate), and blank names.
    problem = bounds.text_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a non-empty queue name")
    return text


def _resource(text: str) -> tuple[str, int]:
    name, sep, capacity = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"must look like NAME=N, got {text!r}")
    problem = bounds.text_problem(name.strip())
    if problem is not None:
        raise argparse.ArgumentTypeError(f"resource name {problem}")
    value = _whole(capacity)
    problem = capacity_problem(capacity if value is None else value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"capacity of {name!r} {problem}")
    assert value is not None
    return name.strip(), value


# Any TCP port; 0 asks the system for a free one (the worker prints which).
_PORT = bounds.IntRange(0, 65535)
_METRICS_HINT = "pip install 'cairnq-django[metrics]'"


def _host(text: str) -> str:
    problem = metrics_host_problem(text.strip())
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text.strip()


def _unknown_tasks(missing: list[str], known: list[str]) -> str:
    """``--task``'s error: each name without a handler, with the registered names closest to it."""
    parts = []
    for name in missing:
        close = difflib.get_close_matches(name, known, n=3)
        parts.append(f"{name!r} (did you mean {' or '.join(map(repr, close))}?)" if close else repr(name))
    return (
        f"--task: no handler registered for {', '.join(parts)}; "
        f"registered: {', '.join(sorted(known)) or 'none'}"
    )


def _metrics_endpoint() -> type[WorkerEndpoint]:
    """The worker endpoint's class, or a ``CommandError`` saying to install the extra."""
    try:
        # Imported only for --metrics-port: a worker without it never loads prometheus_client.
        from ...metrics.worker_endpoint import WorkerEndpoint
    except ModuleNotFoundError as exc:
        # Only the package itself missing is the extra not installed; anything
        # else (a module of ours, a prometheus_client too old or broken) is a fault.
        if exc.name != "prometheus_client":
            raise
        raise CommandError(f"--metrics-port needs prometheus-client, which is not installed: {_METRICS_HINT}") from exc
    return WorkerEndpoint


# flag destination -> the CAIRNQ key it stands for (and whose rule it parses with)
_SETTINGS = {
    "concurrency": "CONCURRENCY",
    "lease_ms": "LEASE_MS",
    "max_run_ms": "MAX_RUN_MS",
    "claim_batch": "CLAIM_BATCH",
    "claim_ahead": "CLAIM_AHEAD",
    "poll_interval_ms": "POLL_INTERVAL_MS",
    "max_in_flight_bytes": "MAX_IN_FLIGHT_BYTES",
    "retry_backoff_ms": "RETRY_BACKOFF_MS",
    "retry_backoff_max_ms": "RETRY_BACKOFF_MAX_MS",
    "heartbeat_interval_ms": "HEARTBEAT_INTERVAL_MS",
}


class Command(BaseCommand):
    help = "Claim and run cairnq tasks until SIGTERM/SIGINT (or --burst / --max-tasks)."
    # Checks run in handle(), after the flags are parsed; the worker itself
    # refuses a resource declared neither in settings nor by --resource.
    requires_system_checks: list[str] = []  # noqa: RUF012 - Django's own attribute

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            type=_queue,
            metavar="Q",
            help='Queue to claim from; repeat for several (default CAIRNQ["QUEUES"]).',
        )
        parser.add_argument(
            "--concurrency",
            type=_setting_int("CONCURRENCY"),
            help=f"Handler calls in flight (a batch is one call); at most {bounds.MAX_CONCURRENCY} "
            f'(default CAIRNQ["CONCURRENCY"], {DEFAULTS["CONCURRENCY"]}; the CPUs this process may use, at least 2).',
        )
        parser.add_argument(
            "--resource",
            action="append",
            dest="resources",
            type=_resource,
            metavar="NAME=N",
            help='Declare or override a resource capacity; adds to CAIRNQ["RESOURCES"].',
        )
        parser.add_argument(
            "--lease-ms",
            type=_setting_int("LEASE_MS"),
            help=f'Lease per claim and per heartbeat (default CAIRNQ["LEASE_MS"], {DEFAULTS["LEASE_MS"]}); '
            f"at least three heartbeats, so at least {bounds.MIN_LEASE_MS} with the default heartbeat.",
        )
        parser.add_argument(
            "--max-run-ms",
            type=_setting_int("MAX_RUN_MS"),
            help='Wall-clock ceiling per handler call (default CAIRNQ["MAX_RUN_MS"], unbounded).',
        )
        parser.add_argument(
            "--claim-batch",
            type=_setting_int("CLAIM_BATCH"),
            help='Most rows one claim draw may request (default CAIRNQ["CLAIM_BATCH"], no cap).',
        )
        parser.add_argument(
            "--claim-ahead",
            type=_claim_ahead,
            metavar="N|auto",
            help='Calls to claim beyond the free slots, run as slots free; "auto" claims ahead only tasks '
            'of names seen to run short, 0 never (default CAIRNQ["CLAIM_AHEAD"], '
            f"{DEFAULTS['CLAIM_AHEAD']}).",
        )
        parser.add_argument(
            "--poll-interval-ms",
            type=_setting_int("POLL_INTERVAL_MS"),
            help=f'Idle sleep between empty polls (default CAIRNQ["POLL_INTERVAL_MS"], {DEFAULTS["POLL_INTERVAL_MS"]}).',
        )
        parser.add_argument(
            "--max-in-flight-bytes",
            type=_setting_int("MAX_IN_FLIGHT_BYTES"),
            help='Payload byte budget of calls in flight (default CAIRNQ["MAX_IN_FLIGHT_BYTES"], none).',
        )
        parser.add_argument(
            "--retry-backoff-ms",
            type=_setting_int("RETRY_BACKOFF_MS"),
            help=f'Retry backoff base; 0 disables backoff (default CAIRNQ["RETRY_BACKOFF_MS"], '
            f'{DEFAULTS["RETRY_BACKOFF_MS"]}).',
        )
        parser.add_argument(
            "--retry-backoff-max-ms",
            type=_setting_int("RETRY_BACKOFF_MAX_MS"),
            help=f'Retry backoff cap (default CAIRNQ["RETRY_BACKOFF_MAX_MS"], {DEFAULTS["RETRY_BACKOFF_MAX_MS"]}).',
        )
        parser.add_argument(
            "--drain-timeout",
            type=_seconds,
            metavar="SECONDS",
            help="On SIGTERM, wait this long for calls in flight before handing them back "
            f'(default CAIRNQ["DRAIN_TIMEOUT"], {DEFAULTS["DRAIN_TIMEOUT"]:g}).',
        )
        parser.add_argument(
            "--async-claim-commit",
            action=argparse.BooleanOptionalAction,
            default=None,
            help='Claims commit without waiting for the disk flush (default CAIRNQ["ASYNC_CLAIM_COMMIT"], on).',
        )
        parser.add_argument(
            "--task",
            action="append",
            dest="tasks",
            type=_queue,
            metavar="NAME",
            help="Run only these registered task names (default: every registered handler).",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit 0 once nothing is claimable and nothing is in flight.",
        )
        parser.add_argument(
            "--max-tasks",
            type=_int(bounds.BIG_COUNT),
            metavar="N",
            help="Exit 0 after claiming N tasks and finishing them.",
        )
        parser.add_argument(
            "--metrics-port",
            type=_int(_PORT),
            metavar="PORT",
            help="Serve this worker's Prometheus metrics on PORT (needs cairnq-django[metrics]; 0: any free port).",
        )
        parser.add_argument(
            "--metrics-host",
            type=_host,
            metavar="HOST",
            help=f'Address the metrics endpoint listens on (default CAIRNQ["METRICS_HOST"], '
            f"{DEFAULTS['METRICS_HOST']}: this host only; 0.0.0.0 serves every interface, unauthenticated).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self._configure_logging(options["verbosity"])
        endpoint_class: type[WorkerEndpoint] | None = None
        if options["metrics_port"] is not None:
            endpoint_class = _metrics_endpoint()
        elif options["metrics_host"] is not None:
            raise CommandError("--metrics-host needs --metrics-port")
        config = get_config()
        metrics_host = options["metrics_host"]
        if endpoint_class is not None and metrics_host is None:
            metrics_host = config.get("METRICS_HOST")
            problem = metrics_host_problem(metrics_host)
            if problem is not None:
                raise CommandError(f'CAIRNQ["METRICS_HOST"] {problem}')
        values: dict[str, Any] = {}
        for dest, key in _SETTINGS.items():
            value = options.get(dest)
            if value is None:
                value = config.get(key)
                problem = None if value is None else number_problem(key, value)
                if problem is not None:
                    raise CommandError(f'CAIRNQ["{key}"] {problem}')
            values[dest] = value
        # Checked before connecting, like the flags: a lease the heartbeat
        # cannot renew in time would let another worker take a running task.
        floor = bounds.lease_floor_ms(values["heartbeat_interval_ms"])
        if values["lease_ms"] is not None and values["lease_ms"] < floor:
            source = "--lease-ms" if options.get("lease_ms") is not None else 'CAIRNQ["LEASE_MS"]'
            raise CommandError(
                f"{source} {values['lease_ms']} is shorter than three heartbeats: "
                f"use at least {floor} ms"
            )
        drain = options["drain_timeout"]
        if drain is None:
            drain = config.get("DRAIN_TIMEOUT")
            problem = drain_timeout_problem(drain)
            if problem is not None:
                raise CommandError(f'CAIRNQ["DRAIN_TIMEOUT"] {problem}')
        async_claim_commit = options["async_claim_commit"]
        if async_claim_commit is None:
            async_claim_commit = config.get("ASYNC_CLAIM_COMMIT", True)
            problem = async_claim_commit_problem(async_claim_commit)
            if problem is not None:
                raise CommandError(f'CAIRNQ["ASYNC_CLAIM_COMMIT"] {problem}')
        queues = options["queues"] or config.get("QUEUES")
        problem = queues_problem(queues)
        if problem is not None or queues is None:
            raise CommandError(f'CAIRNQ["QUEUES"] {problem}')
        resources = config.get("RESOURCES") or {}
        for _kind, text in resources_problems(resources):
            raise CommandError(f'CAIRNQ["RESOURCES"]{text}')
        resources = dict(resources)
        for name, capacity in options["resources"] or []:
            resources[name] = capacity
        global_resources = config.get("GLOBAL_RESOURCES") or {}
        for _kind, text in resources_problems(global_resources):
            raise CommandError(f'CAIRNQ["GLOBAL_RESOURCES"]{text}')

        worker_options = WorkerOptions(
            queues=list(dict.fromkeys(queues)),
            concurrency=values["concurrency"],
            resources=resources,
            global_resources=dict(global_resources),
            lease_ms=values["lease_ms"],
            heartbeat_interval_ms=values["heartbeat_interval_ms"],
            max_run_ms=values["max_run_ms"],
            claim_batch=values["claim_batch"],
            claim_ahead=values["claim_ahead"],
            poll_interval_ms=values["poll_interval_ms"],
            max_in_flight_bytes=values["max_in_flight_bytes"],
            retry_backoff_ms=values["retry_backoff_ms"],
            retry_backoff_max_ms=values["retry_backoff_max_ms"],
            drain_timeout=float(drain),
            burst=options["burst"],
            max_tasks=options["max_tasks"],
            async_claim_commit=bool(async_claim_commit),
        )
        if not options["tasks"]:
            # A worker with no handler would claim nothing, forever, in silence.
            problem = no_handlers_problem(config)
            if problem is not None:
                raise CommandError(f"{problem}. {NO_HANDLERS_HINT}")
        alias = config.get("DATABASE") or DEFAULT_DB_ALIAS
        # First: some system checks open the database (a SQLite JSONField's),
        # and a database that is down must be waited out, or refused, here.
        self._require_schema(alias, wait=not options["burst"])
        self._run_checks(resources)
        self._refuse_unexpected_pooler(config)
        self._warn_clock_skew(alias)
        definitions = None
        if options["tasks"]:
            known = registered()
            missing = [name for name in options["tasks"] if name not in known]
            if missing:
                raise CommandError(_unknown_tasks(missing, list(known)))
            definitions = [known[name] for name in dict.fromkeys(options["tasks"])]
        try:
            worker = Worker(worker_options, definitions=definitions)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        # The handlers go in before the banner: a supervisor that signals once it has
        # read the banner gets a clean drain and exit 0, never the default -15.
        with two_phase_signals(worker):
            self.stdout.write(worker.banner())
            if not worker.definitions:
                logging.getLogger("cairnq_django.worker").warning(
                    'no task handler registered: this worker claims nothing and runs housekeeping only '
                    '(CAIRNQ["FOREIGN_TASKS"] says other SDKs\' workers run the tasks)'
                )
            endpoint = None
            if endpoint_class is not None:
                host, port = metrics_host, options["metrics_port"]
                try:
                    endpoint = endpoint_class(worker, host, port)
                except OSError as exc:
                    raise CommandError(
                        f"--metrics-port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}"
                    ) from exc
                self.stdout.write(f"  metrics: {endpoint.url}")
            self.stdout.flush()
            try:
                code = worker.run()
            finally:
                if endpoint is not None:
                    endpoint.stop()
        if code:
            raise CommandError(
                "worker stopped to be restarted (see the log)", returncode=code
            )

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        finally:
            # Undo _configure_logging: a worker run in-process (call_command)
            # must not leave its handler or level behind.
            restore = getattr(self, "_restore_logging", None)
            if restore is not None:
                restore()

    def _configure_logging(self, verbosity: int) -> None:
        """Make the worker's log visible at ``-v 1`` (INFO) and ``-v 2`` (DEBUG, per claim).

        A project that routes "cairnq_django" (or any logger above it, the
        root included) somewhere keeps its handlers and formats; only the level
        follows ``-v``. A project with no such handler (Django's default
        LOGGING) gets one on this command's stderr, so nothing prints twice
        either way.
        """
        logger = logging.getLogger("cairnq_django")
        level = logger.level
        handler: logging.Handler | None = None
        if not logger.hasHandlers():
            # The wrapped stream: OutputWrapper would style each line as an error.
            handler = logging.StreamHandler(getattr(self.stderr, "_out", self.stderr))
            handler.setFormatter(logging.Formatter(_LOG_FORMAT))
            logger.addHandler(handler)
            if verbosity == 1:
                logger.setLevel(logging.INFO)
        if verbosity == 0:
            logger.setLevel(logging.WARNING)
        elif verbosity >= 2:
            logger.setLevel(logging.DEBUG)

        def restore() -> None:
            logger.setLevel(level)
            if handler is not None:
                logger.removeHandler(handler)

        self._restore_logging = restore

    def _run_checks(self, resources: dict[str, int]) -> None:
        problems = [
            message
            for message in checks.run_checks(include_deployment_checks=False)
            if message.is_serious()
            and not message.is_silenced()
        ]
        if problems:
            raise CommandError(
                "System check identified problems:\n"
                + "\n".join(f"  {problem}" for problem in problems)
            )

    def _refuse_unexpected_pooler(self, config: dict[str, Any]) -> None:
        """Refuse to start behind a transaction pooler the settings do not declare (cairnq.E024).

        Adapting in place would not do: the project's other processes (web,
        shell) would still prepare statements through the pooler, so the
        settings must change; the error names them.
        """
        error = queue_pooler_error(config)
        if error is not None and not error.is_silenced():
            raise CommandError(f"{error.msg}\n  HINT: {error.hint} ({error.id})")

    def _warn_clock_skew(self, alias: str) -> None:
        """Warn when this host's clock and PostgreSQL's differ by more than 5 s.

        Leases and due times are judged by the database clock, so the worker
        stays correct; but the logs' times, ``ctx.wait`` timeouts and anything
        a handler schedules from ``time.time()`` would be off by that much.
        """
        if connections[alias].vendor != "postgresql":
            return  # SQLite: the process clock is the only clock
        try:
            skew_ms = get_store().now_ms() - int(time.time() * 1000)
        except Exception:  # noqa: BLE001 - the first claim reports database trouble
            return
        if abs(skew_ms) > 5000:
            logging.getLogger("cairnq_django.worker").warning(
                "this host's clock is %+.1f s off the database's; leases and due "
                "times follow the database clock, but fix NTP on this host",
                -skew_ms / 1000,
            )

    def _require_schema(self, alias: str, *, wait: bool = True) -> None:
        """Refuse to start before ``migrate cairnq``; wait out a database that is down.

        Only an outage is waited out (``wait``; a ``--burst`` run has nothing
        to wait for and exits instead): an error that retrying cannot mend,
        such as a SQLite file that is not a database, ends the command at once.
        """
        retries = Backoff(_START_RETRY_FIRST_S, _START_RETRY_MAX_S, jitter=False)
        while True:
            try:
                connection = connections[alias]
                executor = MigrationExecutor(connection)
                targets = [
                    node
                    for node in executor.loader.graph.leaf_nodes()
                    if node[0] == "cairnq"
                ]
                pending = executor.migration_plan(targets) if targets else []
                tables = connection.introspection.table_names()
                break
            except DatabaseError as exc:
                if not wait or not isinstance(exc, OperationalError):
                    raise CommandError(
                        f"cannot open database {alias!r} ({_describe(alias)}): {exc}"
                    ) from exc
                delay = retries.next_delay()
                self.stderr.write(
                    f"database unavailable ({exc}); retrying in {delay:.1f} s"
                )
                connections[alias].close()
                time.sleep(delay)
        if pending:
            raise CommandError(
                f"cairnq migrations are not applied to database {alias!r}; {_MIGRATE_HINT}"
            )
        if "cairnq_tasks" not in tables:
            raise CommandError(
                f"the cairnq tables are missing from database {alias!r}; {_MIGRATE_HINT}"
            )


def _describe(alias: str) -> str:
    """Name the database an alias points at, without its password."""
    settings_dict = connections[alias].settings_dict
    if connections[alias].vendor == "sqlite":
        return f"SQLite file {settings_dict.get('NAME')}"
    host = settings_dict.get("HOST") or "localhost"
    port = settings_dict.get("PORT") or 5432
    return f"{connections[alias].vendor} database {settings_dict.get('NAME')!r} on {host}:{port}"
