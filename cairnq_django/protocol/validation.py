"""The argument rules of submit, list, purge and queue_depth, defined once.

The public API, the ``django.tasks`` backend and the store all call these, so
a value is refused with the same message whichever layer meets it first.
Integer ranges and the text rule are ``bounds``'s; this module names which
range each argument takes. Pure: no settings, no database.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import bounds

# What a keyed submit does when the key already names a task (protocol 3.1).
CONFLICT_STRATEGIES = ("reuse", "reuse-succeeded", "reject", "replace")

STATUSES = ("queued", "running", "succeeded", "failed", "canceled")
TERMINAL_STATUSES = ("succeeded", "failed", "canceled")


def conflict_problem(conflict: Any) -> str | None:
    """Say what is wrong with a conflict strategy ("conflict must ..."), or None."""
    if conflict in CONFLICT_STRATEGIES:
        return None
    return f"conflict must be one of {', '.join(CONFLICT_STRATEGIES)}; got {conflict!r}"


def check_conflict(conflict: Any) -> None:
    """Raise ``ValueError`` unless ``conflict`` is one of ``CONFLICT_STRATEGIES``."""
    # The membership test first: this runs on every submit.
    if conflict not in CONFLICT_STRATEGIES:
        raise ValueError(conflict_problem(conflict))


# Every keyword ``submit`` takes besides name and payload; submit_many accepts
# the same set per item and as shared defaults.
SUBMIT_OPTIONS = (
    "key",
    "conflict",
    "queue",
    "priority",
    "max_attempts",
    "delay_ms",
    "metadata",
    "correlation_id",
    "parent_id",
    "root_id",
)


def _optional_text(value: Any, label: str) -> None:
    bounds.check_text(value, label, optional=True)


# The rule of each submit option checked on its own; conflict and metadata are
# checked when each item's spec is built.
_OPTION_RULES: dict[str, Callable[[Any, str], Any]] = {
    "priority": bounds.PRIORITY.check,
    "max_attempts": bounds.MAX_ATTEMPTS.check,
    "delay_ms": bounds.DELAY_MS.check,
    "queue": bounds.check_text,
    "key": _optional_text,
    "correlation_id": _optional_text,
    "parent_id": _optional_text,
    "root_id": _optional_text,
}


def check_submit_args(
    name: Any,
    queue: Any,
    key: Any,
    conflict: Any,
    priority: Any,
    max_attempts: Any,
    delay_ms: Any,
    correlation_id: Any,
    parent_id: Any,
    root_id: Any,
) -> None:
    """Check one submit's scalar arguments in the protocol's order (3.1).

    Conflict, max_attempts and delay_ms first, then the other argument types;
    the caller encodes payload and metadata after this.
    """
    check_conflict(conflict)
    bounds.MAX_ATTEMPTS.check(max_attempts, "max_attempts")
    bounds.DELAY_MS.check(delay_ms, "delay_ms")
    bounds.check_text(name, "name")
    bounds.check_text(queue, "queue")
    bounds.PRIORITY.check(priority, "priority")
    bounds.check_text(key, "key", optional=True)
    bounds.check_text(correlation_id, "correlation_id", optional=True)
    bounds.check_text(parent_id, "parent_id", optional=True)
    bounds.check_text(root_id, "root_id", optional=True)


def check_submit_option(option: str, value: Any) -> None:
    """Check one shared ``submit_many`` option by its own rule (unknown names pass: the caller refuses them)."""
    rule = _OPTION_RULES.get(option)
    if rule is not None:
        rule(value, option)


def check_spec(spec: Any) -> None:
    """The rules a store applies to a ready ``SubmitSpec`` (its JSON is already encoded).

    The same ranges ``check_submit_args`` applies: a spec built by hand must
    not reach the database with a value one dialect stores and the other refuses.
    """
    check_conflict(spec.conflict)
    bounds.MAX_ATTEMPTS.check(spec.max_attempts, "max_attempts")
    bounds.DELAY_MS.check(spec.delay_ms, "delay_ms")
    bounds.PRIORITY.check(spec.priority, "priority")


def check_status(status: Any, label: str = "status", allowed: Sequence[str] = STATUSES) -> None:
    """Raise ``ValueError`` unless ``status`` is None or one of ``allowed``."""
    if status is not None and status not in allowed:
        raise ValueError(f"{label} must be one of {', '.join(allowed)}; got {status!r}")


def check_list_args(status: Any, limit: Any, offset: Any) -> None:
    """The rules of ``list``: a known status (or None) and a LIMIT / OFFSET window."""
    check_status(status)
    bounds.LIST_LIMIT.check(limit, "limit")
    bounds.OFFSET.check(offset, "offset")


def check_purge_args(older_than_ms: Any, limit: Any, status: Any) -> None:
    """The rules of ``purge``: an age, a batch of at least one, a terminal status (or None)."""
    bounds.AGE_MS.check(older_than_ms, "older_than_ms")
    bounds.PURGE_LIMIT.check(limit, "limit")
    check_status(status, allowed=TERMINAL_STATUSES)


def check_max_depth(max_depth: Any) -> None:
    """The rule of ``queue_depth``'s limit."""
    bounds.MAX_DEPTH.check(max_depth, "max_depth")


def check_optional_texts(**values: Any) -> None:
    """Check optional text arguments (filters, ids): None passes, anything else must be storable text."""
    for label, value in values.items():
        if value is not None:
            bounds.check_text(value, label)
