"""``manage.py cairnq_purge``: delete finished tasks in bounded batches.

Only terminal rows (succeeded, failed, canceled) completed before the cutoff
are deleted; the store's purge statement refuses live rows, so a queued or
running task is never touched whatever the flags say.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...client.retention import PurgeRule, parse_duration_ms, purge_rule
from ...models import TERMINAL_STATUSES, Task
from ...protocol import bounds
from ...store import get_store
from ...store.missing_schema import command_schema_required
from ...workflows.retention import forget_finished_runs


def _duration(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _batch_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 100_000:
        raise argparse.ArgumentTypeError("must be between 1 and 100000")
    return value


def _status(text: str) -> str:
    if text not in TERMINAL_STATUSES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a terminal status; use {', '.join(TERMINAL_STATUSES)} (live tasks are never purged)"
        )
    return text


def _text(text: str) -> str:
    # The rule purge() applies to its filters (bounds.text_problem), refused here
    # as a usage error instead of a traceback.
    problem = bounds.text_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


class Command(BaseCommand):
    help = "Delete finished tasks completed more than --older-than ago, in bounded batches."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than", required=True, type=_duration, metavar="DURATION",
            help="Age of completion to purge past: 500ms, 30s, 30m, 12h, 7d or 2w.",
        )
        parser.add_argument(
            "--status", action="append", type=_status, default=None, metavar="S",
            help="Terminal status to purge (repeatable); default: all of " + ", ".join(TERMINAL_STATUSES) + ".",
        )
        parser.add_argument("--queue", type=_text, metavar="Q", help="Only this queue.")
        parser.add_argument("--name", type=_text, metavar="N", help="Only tasks with this name.")
        parser.add_argument(
            "--batch-size", type=_batch_size, default=1000, metavar="N",
            help="Most rows deleted per statement (default 1000); fewer while a statement takes over 50 ms.",
        )
        parser.add_argument("--dry-run", action="store_true", help="Count what would be deleted; delete nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        store = get_store()
        with command_schema_required(store.alias):
            self._purge(store, options)

    def _purge(self, store: Any, options: dict[str, Any]) -> None:
        statuses: list[str | None] = sorted(set(options["status"])) if options["status"] else [None]
        rules = [
            PurgeRule(options["older_than"], status=status, queue=options["queue"], name=options["name"])
            for status in statuses
        ]
        if options["dry_run"]:
            self._dry_run(store, rules)
            return
        verbosity = options["verbosity"]
        total = 0
        for rule in rules:
            label = rule.status or "terminal"

            def report(count: int, label: str = label) -> None:
                nonlocal total
                total += count
                if count and verbosity >= 1:
                    self.stdout.write(f"purged {count} {label} task(s) ({total} so far)")

            purge_rule(store, rule, limit=options["batch_size"], on_batch=report)
        # Then the finished workflow runs none of whose task rows is left (docs/workflows.md, "Retention").
        runs = forget_finished_runs(store.alias)
        if runs and verbosity >= 1:
            self.stdout.write(f"removed {runs} finished workflow run(s) whose tasks are all purged")
        self.stdout.write(self.style.SUCCESS(f"purged {total} task(s)"))

    def _dry_run(self, store: Any, rules: list[PurgeRule]) -> None:
        # The cutoff is taken from the store's clock, as purge itself does.
        now_ms = store.now_ms()
        total = 0
        for rule in rules:
            rows = Task.objects.using(store.alias).filter(
                status__in=[rule.status] if rule.status else TERMINAL_STATUSES,
                completed_at_ms__isnull=False,
                completed_at_ms__lt=now_ms - rule.older_than_ms,
            )
            if rule.queue is not None:
                rows = rows.filter(queue=rule.queue)
            if rule.name is not None:
                rows = rows.filter(name=rule.name)
            count = rows.count()
            total += count
            self.stdout.write(f"would purge {count} {rule.status or 'terminal'} task(s)")
        self.stdout.write(self.style.SUCCESS(f"dry run: {total} task(s) would be purged; nothing deleted"))
