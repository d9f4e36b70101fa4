"""``manage.py cairnq_queues list|pause NAME|resume NAME``.

Pins: a queue missing from ``list`` (one with tasks, or a paused one with
none), a wrong state or count; a second pause or an idle resume that fails
or changes the first pause; bad input that writes anything or fails without
naming the argument; and values handed to ``call_command`` as keywords
(argparse never sees them) getting past the API's rule.
"""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

import cairnq_django as cq

from . import make_task


def run(*args: str, **options: Any) -> str:
    out = StringIO()
    call_command("cairnq_queues", *args, stdout=out, **options)
    return out.getvalue()


def pauses() -> list[tuple[str, str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT queue, paused_by, reason FROM cairnq_django_queue_pause ORDER BY queue")
        return [tuple(row) for row in cursor.fetchall()]


def test_pause_and_resume(store: Any) -> None:
    assert run("pause", "emails", "--new", "--reason", "provider outage", "--by", "ops") == "paused queue 'emails'\n"
    assert pauses() == [("emails", "ops", "provider outage")]
    again = run("pause", "emails", "--reason", "other")
    assert again.startswith("queue 'emails' was already paused (since ") and again.endswith(" by ops)\n")
    assert pauses() == [("emails", "ops", "provider outage")]
    assert run("resume", "emails") == "resumed queue 'emails'\n"
    assert run("resume", "emails") == "queue 'emails' was not paused\n"
    assert pauses() == []


def test_pause_records_the_login_name_by_default(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "deployer")
    run("pause", "emails", "--new")
    assert pauses() == [("emails", "deployer", "")]


def test_list_shows_every_queue_with_its_state_and_counts(store: Any) -> None:
    assert run("list") == "no queues: no tasks and no pauses\n"
    make_task(store, "queued", queue="emails")
    make_task(store, "running", queue="emails")
    make_task(store, "succeeded", queue="default")
    cq.pause_queue("emails", reason="provider\noutage", by="ops")
    cq.pause_queue("empty")
    lines = run("list").splitlines()
    assert lines[0].split() == [
        "queue", "state", "queued", "running", "succeeded", "failed", "canceled", "paused", "since", "by", "reason",
    ]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["default"] == ["default", "active", "0", "0", "1", "0", "0"]
    assert rows["emails"][:7] == ["emails", "paused", "1", "1", "0", "0", "0"]
    assert rows["emails"][-3:] == ["ops", "provider", "outage"]
    assert rows["empty"][:7] == ["empty", "paused", "0", "0", "0", "0", "0"]

    listed = {row["queue"]: row for row in json.loads(run("list", "--json"))}
    assert sorted(listed) == ["default", "emails", "empty"]
    assert listed["emails"]["paused"] is True and listed["emails"]["reason"] == "provider\noutage"
    assert listed["emails"]["counts"] == {"queued": 1, "running": 1, "succeeded": 0, "failed": 0, "canceled": 0}
    assert listed["default"] == {
        "queue": "default", "paused": False, "paused_at_ms": None, "paused_by": None, "reason": None,
        "counts": {"queued": 0, "running": 0, "succeeded": 1, "failed": 0, "canceled": 0},
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("stop", "emails"), "invalid choice: 'stop'"),
        (("pause",), "the following arguments are required: NAME"),
        (("pause", ""), "argument NAME: must be a non-empty string"),
        (("pause", "a\x00b"), "argument NAME: must not contain NUL"),
        (("pause", "q" * 1025), "argument NAME: must be at most 1024 bytes"),
        (("pause", "emails", "--reason", "r" * 1025), "argument --reason: must be at most 1024 bytes"),
        (("pause", "emails", "--by", "u" * 151), "argument --by: must be at most 150 characters"),
        (("resume", "\udc80"), "argument NAME: must not contain a lone surrogate"),
    ],
)
def test_bad_input_names_the_argument_and_writes_nothing(store: Any, args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert pauses() == []


def test_keyword_options_are_held_to_the_same_rule(store: Any) -> None:
    with pytest.raises(CommandError, match="^reason must not contain NUL"):
        run("pause", "emails", reason="a\x00b")
    with pytest.raises(CommandError, match="^by must be a string"):
        run("pause", "emails", by=7)
    assert pauses() == []
