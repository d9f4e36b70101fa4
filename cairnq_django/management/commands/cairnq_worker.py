"""``manage.py cairnq_worker``: run a worker until signalled (see docs/worker.md).

Thin on purpose: parse and validate options (each flag falls back to its
``CAIRNQ`` key), check the schema is installed, build a ``Worker`` and run it.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, DatabaseError, OperationalError, connections

_MIGRATE_HINT = "run manage.py migrate cairnq"


def _int(minimum: int, what: str = "an integer") -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(
                f"must be {what} >= {minimum}, got {text!r}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"must be {what} >= {minimum}, got {text!r}"
            )
        return value

    parse.__name__ = "integer"
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds >= 0, got {text!r}"
        ) from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds >= 0, got {text!r}"
        )
    return value


def _queue(text: str) -> str:
    if not text or not text.strip():
        raise argparse.ArgumentTypeError("must be a non-empty queue name")
    return text


def _resource(text: str) -> tuple[str, int]:
    name, sep, capacity = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"must look like NAME=N, got {text!r}")
    try:
        value = int(capacity)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"capacity of {name!r} must be an integer >= 1, got {capacity!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"capacity of {name!r} must be an integer >= 1, got {capacity!r}"
        )
    return name.strip(), value


# flag destination -> (CAIRNQ key, validator for the setting's value)
_SETTINGS = {
    "concurrency": ("CONCURRENCY", 1),
    "lease_ms": ("LEASE_MS", 1),
    "max_run_ms": ("MAX_RUN_MS", 1),
    "claim_batch": ("CLAIM_BATCH", 1),
    "poll_interval_ms": ("POLL_INTERVAL_MS", 1),
    "max_in_flight_bytes": ("MAX_IN_FLIGHT_BYTES", 1),
    "retry_backoff_ms": ("RETRY_BACKOFF_MS", 0),
    "retry_backoff_max_ms": ("RETRY_BACKOFF_MAX_MS", 0),
    "heartbeat_interval_ms": ("HEARTBEAT_INTERVAL_MS", 1),
}


class Command(BaseCommand):
    help = "Claim and run cairnq tasks until SIGTERM/SIGINT (or --burst / --max-tasks)."
    # Checks run in handle(), where --resource can satisfy cairnq.E010.
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
            type=_int(1),
            help="Handler calls in flight (a batch is one call).",
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
            "--lease-ms", type=_int(1), help="Lease per claim and per heartbeat."
        )
        parser.add_argument(
            "--max-run-ms", type=_int(1), help="Wall-clock ceiling per handler call."
        )
        parser.add_argument(
            "--claim-batch", type=_int(1), help="Most rows one claim draw may request."
        )
        parser.add_argument(
            "--poll-interval-ms", type=_int(1), help="Idle sleep between empty polls."
        )
        parser.add_argument(
            "--max-in-flight-bytes",
            type=_int(1),
            help="Payload byte budget of calls in flight.",
        )
        parser.add_argument(
            "--retry-backoff-ms",
            type=_int(0),
            help="Retry backoff base; 0 disables backoff.",
        )
        parser.add_argument(
            "--retry-backoff-max-ms", type=_int(0), help="Retry backoff cap."
        )
        parser.add_argument(
            "--drain-timeout",
            type=_seconds,
            metavar="SECONDS",
            help="On SIGTERM, wait this long for calls in flight before handing them back.",
        )
        parser.add_argument(
            "--async-claim-commit",
            action=argparse.BooleanOptionalAction,
            default=None,
            help='Claims commit without waiting for the disk flush (default CAIRNQ["ASYNC_CLAIM_COMMIT"]).',
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
            type=_int(1),
            metavar="N",
            help="Exit 0 after claiming N tasks and finishing them.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from ...conf import get_config
        from ...registry import registered
        from ...worker.loop import Worker, WorkerOptions
        from ...worker.shutdown import two_phase_signals

        self._configure_logging(options["verbosity"])
        config = get_config()
        values: dict[str, Any] = {}
        for dest, (key, minimum) in _SETTINGS.items():
            value = options.get(dest)
            if value is None:
                value = config.get(key)
                if value is not None and (
                    isinstance(value, bool)
                    or not isinstance(value, int)
                    or value < minimum
                ):
                    raise CommandError(
                        f'CAIRNQ["{key}"] must be an integer >= {minimum}, got {value!r}'
                    )
            values[dest] = value
        drain = options["drain_timeout"]
        if drain is None:
            drain = config.get("DRAIN_TIMEOUT")
            if (
                isinstance(drain, bool)
                or not isinstance(drain, (int, float))
                or drain < 0
            ):
                raise CommandError(
                    f'CAIRNQ["DRAIN_TIMEOUT"] must be a number of seconds >= 0, got {drain!r}'
                )
        async_claim_commit = options["async_claim_commit"]
        if async_claim_commit is None:
            async_claim_commit = config.get("ASYNC_CLAIM_COMMIT", True)
            if not isinstance(async_claim_commit, bool):
                raise CommandError(
                    f'CAIRNQ["ASYNC_CLAIM_COMMIT"] must be True or False, got {async_claim_commit!r}'
                )
        queues = options["queues"] or config.get("QUEUES")
        if (
            not queues
            or isinstance(queues, str)
            or not all(isinstance(q, str) and q for q in queues)
        ):
            raise CommandError(
                f'CAIRNQ["QUEUES"] must be a non-empty list of queue names, got {queues!r}'
            )
        resources = config.get("RESOURCES") or {}
        if not isinstance(resources, dict):
            raise CommandError(
                f'CAIRNQ["RESOURCES"] must be a dict of name -> capacity, got {resources!r}'
            )
        resources = dict(resources)
        for name, capacity in options["resources"] or []:
            resources[name] = capacity

        worker_options = WorkerOptions(
            queues=list(dict.fromkeys(queues)),
            concurrency=values["concurrency"],
            resources=resources,
            lease_ms=values["lease_ms"],
            heartbeat_interval_ms=values["heartbeat_interval_ms"],
            max_run_ms=values["max_run_ms"],
            claim_batch=values["claim_batch"],
            poll_interval_ms=values["poll_interval_ms"],
            max_in_flight_bytes=values["max_in_flight_bytes"],
            retry_backoff_ms=values["retry_backoff_ms"],
            retry_backoff_max_ms=values["retry_backoff_max_ms"],
            drain_timeout=float(drain),
            burst=options["burst"],
            max_tasks=options["max_tasks"],
            async_claim_commit=bool(async_claim_commit),
        )
        alias = config.get("DATABASE") or DEFAULT_DB_ALIAS
        # First: some system checks open the database (a SQLite JSONField's),
        # and a database that is down must be waited out, or refused, here.
        self._require_schema(alias, wait=not options["burst"])
        self._run_checks(resources)
        self._warn_clock_skew(alias)
        definitions = None
        if options["tasks"]:
            known = registered()
            missing = [name for name in options["tasks"] if name not in known]
            if missing:
                raise CommandError(
                    f"--task: no handler registered for {', '.join(map(repr, missing))}; "
                    f"registered: {', '.join(sorted(known)) or 'none'}"
                )
            definitions = [known[name] for name in dict.fromkeys(options["tasks"])]
        try:
            worker = Worker(worker_options, definitions=definitions)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(worker.banner())
        self.stdout.flush()
        with two_phase_signals(worker):
            code = worker.run()
        if code:
            raise CommandError(
                "worker stopped to be restarted (see the log)", returncode=code
            )

    def _configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("cairnq_django")
        if verbosity == 0:
            logger.setLevel(logging.WARNING)
        elif verbosity >= 2:
            logger.setLevel(logging.DEBUG)

    def _run_checks(self, resources: dict[str, int]) -> None:
        problems = [
            message
            for message in checks.run_checks(include_deployment_checks=False)
            if message.is_serious()
            and not message.is_silenced()
            # --resource may declare what settings lack; the worker re-checks below.
            and message.id != "cairnq.E010"
        ]
        if problems:
            raise CommandError(
                "System check identified problems:\n"
                + "\n".join(f"  {problem}" for problem in problems)
            )

    def _warn_clock_skew(self, alias: str) -> None:
        """Warn when this host's clock and PostgreSQL's differ by more than 5 s.

        Leases and due times are judged by the database clock, so the worker
        stays correct; but the logs' times, ``ctx.wait`` timeouts and anything
        a handler schedules from ``time.time()`` would be off by that much.
        """
        if connections[alias].vendor != "postgresql":
            return  # SQLite: the process clock is the only clock
        from ...store import get_store

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
        from django.db.migrations.executor import MigrationExecutor

        delay = 0.5
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
                self.stderr.write(
                    f"database unavailable ({exc}); retrying in {delay:.1f} s"
                )
                connections[alias].close()
                time.sleep(delay)
                delay = min(5.0, delay * 2)
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
