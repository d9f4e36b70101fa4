"""``manage.py cairnq_stats``: task counts per queue and status."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

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
    help = "Print task counts per queue and status (a full read of the task table)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue", type=_queue, metavar="Q", help="Only this queue (listed even if empty).")
        parser.add_argument("--json", action="store_true", help='Print {"queue": {"status": count}} as JSON.')

    def handle(self, *args: Any, **options: Any) -> None:
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
        widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
        for row in [header, *lines]:
            cells = [row[0].ljust(widths[0]), *(cell.rjust(width) for cell, width in zip(row[1:], widths[1:]))]
            self.stdout.write("  ".join(cells).rstrip())
