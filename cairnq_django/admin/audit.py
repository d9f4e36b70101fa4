"""The admin log of what cancel and retry did: one ``LogEntry`` per changed task, written in bulk.

Django's ``ModelAdmin.log_change`` writes one row per call, so an action over
10,000 tasks would cost 10,000 INSERTs; here each chunk of changed rows is
one ``bulk_create``. Entries carry the task's text primary key as
``object_id`` and the task's content type, which is what the admin's History
page (``history_view``) and *Recent actions* look up, unmanaged table or not.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType

from ..models import Task

# LogEntry.object_repr is a CharField of this length.
REPR_CHARS = 200


def log_task_changes(user_id: int, entries: Iterable[tuple[Task, str]]) -> int:
    """Write one CHANGE entry per ``(task, message)`` for ``user_id``; return how many.

    The content type is Django's cached lookup (no query after the first), so
    the whole call is one INSERT, or a few where the database caps the
    parameters of one statement.
    """
    content_type_id = ContentType.objects.get_for_model(Task, for_concrete_model=False).pk
    rows = [
        LogEntry(
            user_id=user_id,
            content_type_id=content_type_id,
            object_id=str(task.pk),
            object_repr=str(task)[:REPR_CHARS],
            action_flag=CHANGE,
            change_message=message,
        )
        for task, message in entries
    ]
    if rows:
        LogEntry.objects.bulk_create(rows)
    return len(rows)
