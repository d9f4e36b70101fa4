"""``manage.py cairnq_queues [list]|pause NAME|resume NAME``: see and toggle queue pauses.

Thin: the rules of a queue name, a reason and an author are the API's
(``client/pauses.py``), applied as the flags are parsed; pausing a paused
queue or resuming an unpaused one says so and succeeds. Pausing a queue
nothing uses is refused (a typo would leave the real queue running) unless
``--new`` says it is meant. Names and reasons are data: the table shows
their control characters escaped, so none reaches the terminal.
"""

from __future__ import annotations

import argparse
import getpass
import json
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...client import pauses
from ...models import TaskStatus, ms_to_datetime
from ...protocol import bounds
from ...store import get_store
from ...store.missing_schema import command_schema_required


def _checked(problem: Callable[[Any], str | None]) -> Callable[[str], str]:
    """An argparse type refusing what ``problem`` refuses, with its words."""

    def parse(text: str) -> str:
        found = problem(text)
        if found is not None:
            raise argparse.ArgumentTypeError(found)
        return text

    return parse


def _default_by() -> str:
    """Who runs the command, as the system knows them (empty when it does not)."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        return ""
    return name if pauses.by_problem(name) is None else ""


def _shown(text: str) -> str:
    """``text`` for a terminal: each character ``repr`` would escape (C0 and C1 controls, DEL,
    line separators, bidi overrides) escaped as ``repr`` does, so none moves the cursor or fakes a row."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _when(paused_at_ms: int) -> str:
    moment = ms_to_datetime(paused_at_ms)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ") if moment is not None else str(paused_at_ms)


class Command(BaseCommand):
    help = "List queues with their paused state and task counts (the default), or pause or resume one queue."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", metavar="{list,pause,resume}")
        listing = actions.add_parser("list", help="Every queue with tasks or a pause: state and counts (the default).")
        listing.add_argument("--json", action="store_true", help="Print one JSON object per queue in a list.")
        pause = actions.add_parser("pause", help="Stop workers of this app from starting the queue's tasks.")
        pause.add_argument("name", type=_checked(bounds.text_problem), metavar="NAME", help="The queue.")
        pause.add_argument("--reason", type=_checked(pauses.reason_problem), default="", help="Why (shown by list and the admin).")
        pause.add_argument("--by", type=_checked(pauses.by_problem), default=None, help="Who paused (default: your login name).")
        pause.add_argument(
            "--new",
            action="store_true",
            help="Pause a queue nothing uses yet (no declared task, setting, task or live worker), ahead of its tasks.",
        )
        resume = actions.add_parser("resume", help="Let workers start the queue's tasks again.")
        resume.add_argument("name", type=_checked(bounds.text_problem), metavar="NAME", help="The queue.")

    def handle(self, *args: Any, **options: Any) -> None:
        store = get_store()
        action = options["action"]
        try:
            with command_schema_required(store.alias):
                if action == "pause":
                    self._pause(options["name"], options["reason"], options["by"], new=options["new"])
                elif action == "resume":
                    self._resume(options["name"])
                else:
                    self._list(store, as_json=options.get("json", False))
        except ValueError as exc:  # call_command() may hand in values argparse never saw
            raise CommandError(str(exc)) from exc

    def _pause(self, name: str, reason: str, by: str | None, *, new: bool = False) -> None:
        # Checked first, so a bad --reason or --by is named before the name is judged.
        pauses.check_pause_args(name, reason, "" if by is None else by)
        if not new:
            problem = pauses.unused_queue_problem(name)
            if problem is not None:
                raise CommandError(f"{problem}; add --new to pause it ahead of its first task")
        pause, created = pauses.pause(name, reason=reason, by=_default_by() if by is None else by)
        if created:
            self.stdout.write(f"paused queue {name!r}")
            return
        who = f" by {_shown(pause.paused_by)}" if pause.paused_by else ""
        self.stdout.write(f"queue {name!r} was already paused (since {_when(pause.paused_at_ms)}{who})")

    def _resume(self, name: str) -> None:
        if pauses.resume_queue(name):
            self.stdout.write(f"resumed queue {name!r}")
        else:
            self.stdout.write(f"queue {name!r} was not paused")

    def _list(self, store: Any, *, as_json: bool) -> None:
        stats = store.stats()
        paused = {pause.queue: pause for pause in pauses.paused_queues()}
        statuses = list(TaskStatus.values)
        queues = sorted(set(stats) | set(paused))
        if as_json:
            rows = []
            for queue in queues:
                pause = paused.get(queue)
                rows.append({
                    "queue": queue,
                    "paused": pause is not None,
                    "paused_at_ms": pause.paused_at_ms if pause else None,
                    "paused_by": pause.paused_by if pause else None,
                    "reason": pause.reason if pause else None,
                    "counts": {status: stats.get(queue, {}).get(status, 0) for status in statuses},
                })
            self.stdout.write(json.dumps(rows))
            return
        if not queues:
            self.stdout.write("no queues: no tasks and no pauses")
            return
        header = ["queue", "state", *statuses, "paused since", "by", "reason"]
        lines = []
        for queue in queues:
            pause = paused.get(queue)
            counts = stats.get(queue, {})
            lines.append([
                _shown(queue),
                "paused" if pause else "active",
                *(str(counts.get(status, 0)) for status in statuses),
                _when(pause.paused_at_ms) if pause else "",
                _shown(pause.paused_by) if pause else "",
                # One line per queue: a reason's runs of white space are shown as one space.
                _shown(" ".join(pause.reason.split())) if pause else "",
            ])
        widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
        numeric = range(2, 2 + len(statuses))
        for row in [header, *lines]:
            cells = [cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i]) for i, cell in enumerate(row)]
            self.stdout.write("  ".join(cells).rstrip())
