"""``manage.py cairnq_stats``: task counts per queue and status, or (``--workers``) the registered workers."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...client.workers import WorkerInfo, workers
from ...models import TaskStatus
from ...protocol import bounds
from ...store import get_store
from ...store.missing_schema import command_schema_required


def _queue(text: str) -> str:
    problem = bounds.text_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


class Command(BaseCommand):
    help = (
        "Print task counts per queue and status (a full read of the task table), "
        "or with --workers the registered workers."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue", type=_queue, metavar="Q", help="Only this queue (listed even if empty).")
        parser.add_argument("--json", action="store_true", help='Print {"queue": {"status": count}} as JSON.')
        parser.add_argument(
            "--workers",
            action="store_true",
            help="List the registered workers instead (live and lost; with --all, stopped ones too).",
        )
        parser.add_argument("--all", action="store_true", help="With --workers: stopped workers too.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["workers"]:
            self._workers(options)
            return
        store = get_store()
        with command_schema_required(store.alias):
            stats = store.stats(queue=options["queue"])
        if options["json"]:
            self.stdout.write(json.dumps(stats, sort_keys=True))
            return
        statuses = list(TaskStatus.values)
        if not stats:
            self.stdout.write("no tasks")
            return
        header = ["queue", *statuses, "total"]
        lines = [
            [queue, *(str(counts.get(status, 0)) for status in statuses), str(sum(counts.values()))]
            for queue, counts in sorted(stats.items())
        ]
        self._table(header, lines, left=1)

    def _table(self, header: list[str], lines: list[list[str]], *, left: int) -> None:
        """Write aligned columns: the first ``left`` ones flush left, numbers flush right."""
        widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
        for row in [header, *lines]:
            cells = [
                cell.ljust(width) if i < left else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(row, widths))
            ]
            self.stdout.write("  ".join(cells).rstrip())

    def _workers(self, options: dict[str, Any]) -> None:
        with command_schema_required(get_store().alias):
            found = workers(include_lost=True, include_stopped=options["all"])
        if options["queue"] is not None:
            found = [worker for worker in found if options["queue"] in worker.queues]
        if options["json"]:
            self.stdout.write(json.dumps([worker.as_json() for worker in found], sort_keys=True))
            return
        if not found:
            self.stdout.write("no workers")
            return
        header = ["worker", "state", "host", "pid", "queues", "version", "last seen",
                  "concurrency", "in flight", "succeeded", "failed", "per min"]
        self._table(header, [_worker_line(worker) for worker in found], left=7)


def _worker_line(worker: WorkerInfo) -> list[str]:
    return [
        worker.id,
        worker.state,
        worker.host,
        str(worker.pid),
        ",".join(worker.queues),
        worker.version or "-",
        worker.last_seen_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
        str(worker.concurrency),
        str(worker.in_flight),
        str(worker.succeeded),
        str(worker.failed),
        f"{worker.per_minute:.1f}",
    ]
