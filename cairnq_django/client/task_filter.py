"""A task-list filter as data: what a bulk operation stores and the admin's list applies.

A filter is a dict of at most these keys, each an exact value:

* ``status``: a protocol status, or ``cancel_requested`` (running with a cancel asked);
* ``queue``, ``name``: equality;
* ``error_type``: the error envelope's ``type``, equal;
* ``error_message``: a prefix of the envelope's ``message`` (the triage's
  short message is the message's first line, cut: always a prefix).

The same keys are the task list's query parameters, so a triage link, the
list it opens and the bulk operation started from it select the same rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Substr

from ..models import Task, TaskStatus

FILTER_KEYS = ("status", "queue", "name", "error_type", "error_message")
CANCEL_REQUESTED = "cancel_requested"


def filter_of(params: Mapping[str, Any]) -> dict[str, str]:
    """The filter keys of ``params`` (a query dict or a dict) with a non-empty text value."""
    found: dict[str, str] = {}
    for key in FILTER_KEYS:
        value = params.get(key)
        if isinstance(value, str) and value.strip():
            found[key] = value if key == "error_message" else value.strip()
    return found


def apply_status(queryset: QuerySet[Task], value: str) -> QuerySet[Task]:
    if value == CANCEL_REQUESTED:
        return queryset.filter(status=TaskStatus.RUNNING, cancel_requested_at_ms__isnull=False)
    return queryset.filter(status=value)


def _error_text(key: str) -> Cast:
    # Cast: compared bare, Django would read the right-hand side as JSON on SQLite.
    return Cast(KeyTextTransform(key, "error"), output_field=TextField())


def apply_error_type(queryset: QuerySet[Task], value: str) -> QuerySet[Task]:
    return queryset.alias(cairnq_error_type=_error_text("type")).filter(cairnq_error_type=value)


def apply_error_message(queryset: QuerySet[Task], prefix: str) -> QuerySet[Task]:
    # substr() compares exactly on both dialects; SQLite's LIKE would ignore case.
    head = Substr(_error_text("message"), 1, len(prefix))
    return queryset.alias(cairnq_error_head=head).filter(cairnq_error_head=prefix)


def matching_tasks(spec: Mapping[str, str], queryset: QuerySet[Task]) -> QuerySet[Task]:
    """``queryset`` narrowed to the tasks ``spec`` (see ``filter_of``) selects."""
    for key, value in spec.items():
        if key == "status":
            queryset = apply_status(queryset, value)
        elif key in ("queue", "name"):
            queryset = queryset.filter(**{key: value})
        elif key == "error_type":
            queryset = apply_error_type(queryset, value)
        elif key == "error_message":
            queryset = apply_error_message(queryset, value)
        else:
            raise ValueError(f"unknown task filter key {key!r}")
    return queryset
