"""The page a bulk cancel or retry of more than one task shows before it acts.

As Django's ``delete_selected`` does, the action answers its first POST with
a page saying what will happen (tasks by status, and each status's fate), and
acts on the second, which carries ``post=yes`` and the same selection: the
checked ids, or ``select_across`` with the list's filters kept in the URL the
form posts back to. A single task acts at once.

The counts read at most ``COUNT_LIMIT`` statuses, so "select all" over a
million rows stays one bounded read; past that the page says "more than".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import django
from django.contrib.admin import helpers
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from ..models import Task, TaskStatus

if TYPE_CHECKING:
    from .task_admin import TaskAdmin

COUNT_LIMIT = 10_000
# Tasks named one by one on the page; the rest are counted.
LISTED = 20
TEMPLATE = "admin/cairnq/task/action_confirmation.html"

_FINISHED = (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELED)


@dataclass(frozen=True)
class Confirmable:
    """An action that asks first: its name in the action form, its wording, and each status's fate.

    ``changing`` names the statuses the action changes; the rest are skipped.
    """

    action: str
    title: Promise
    button: Promise
    fates: dict[str, Promise]
    changing: frozenset[str]
    danger: bool = False


_NOT_RETRIED = _("skipped: not failed or canceled")
_RETRIED = frozenset({TaskStatus.FAILED, TaskStatus.CANCELED})

CANCEL = Confirmable(
    action="cancel_tasks",
    title=_("Cancel tasks"),
    button=_("Yes, cancel them"),
    fates={
        TaskStatus.QUEUED: _("canceled"),
        TaskStatus.RUNNING: _("cancel requested: its worker stops it"),
        **{status: _("skipped: already finished") for status in _FINISHED},
    },
    changing=frozenset({TaskStatus.QUEUED, TaskStatus.RUNNING}),
    danger=True,
)
RETRY = Confirmable(
    action="retry_tasks",
    title=_("Retry tasks"),
    button=_("Yes, retry them"),
    fates={
        TaskStatus.FAILED: _("re-queued, attempts kept"),
        TaskStatus.CANCELED: _("re-queued, attempts kept"),
        **{status: _NOT_RETRIED for status in (TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.SUCCEEDED)},
    },
    changing=_RETRIED,
)
RETRY_RESET = Confirmable(
    action="retry_tasks_reset_attempts",
    title=_("Retry tasks, resetting attempts"),
    button=_("Yes, retry them"),
    fates={
        TaskStatus.FAILED: _("re-queued, attempts reset to 0"),
        TaskStatus.CANCELED: _("re-queued, attempts reset to 0"),
        **{status: _NOT_RETRIED for status in (TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.SUCCEEDED)},
    },
    changing=_RETRIED,
)


def needs_confirmation(request: HttpRequest, queryset: QuerySet[Task]) -> bool:
    """True for a first POST whose selection holds more than one task (two ids read at most)."""
    if request.POST.get("post") == "yes":
        return False
    return len(queryset.order_by().values_list("pk", flat=True)[:2]) > 1


def status_counts(queryset: QuerySet[Task]) -> tuple[Counter[str], bool]:
    """The selection's tasks by status, over at most ``COUNT_LIMIT`` rows, and whether it holds more."""
    statuses = list(queryset.order_by().values_list("status", flat=True)[: COUNT_LIMIT + 1])
    more = len(statuses) > COUNT_LIMIT
    return Counter(statuses[:COUNT_LIMIT]), more


def confirmation_page(
    model_admin: TaskAdmin, request: HttpRequest, queryset: QuerySet[Task], kind: Confirmable
) -> TemplateResponse:
    """Render what ``kind`` would do to the selection, with a form that does it."""
    counts, more = status_counts(queryset)
    order = [*TaskStatus.values, *sorted(set(counts) - set(TaskStatus.values))]
    rows = [
        {
            "status": status,
            "label": TaskStatus(status).label if status in TaskStatus.values else status,
            "count": counts[status],
            "fate": kind.fates.get(status, _("skipped: not a protocol status")),
            "changes": status in kind.changing,
        }
        for status in order
        if counts[status]
    ]
    site = model_admin.admin_site.name
    listed = [
        {
            "id": pk,
            "name": name,
            "queue": queue,
            "status": status,
            "label": TaskStatus(status).label if status in TaskStatus.values else status,
            "url": reverse(f"{site}:cairnq_task_change", args=[quote(pk)]),
        }
        for pk, name, queue, status in queryset.order_by("-pk").values_list("pk", "name", "queue", "status")[:LISTED]
    ]
    total = sum(counts.values())
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "title": kind.title,
        "opts": model_admin.opts,
        "app_label": model_admin.opts.app_label,
        "kind": kind,
        "rows": rows,
        "total": total,
        "more": more,
        "changing": sum(row["count"] for row in rows if row["changes"]),
        "listed": listed,
        "unlisted": total - len(listed),
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "back_url": request.get_full_path(),
        "media": model_admin.media,
        # Django 6's admin styles breadcrumbs as a list (<ol>); 5.2's as a <div>.
        "breadcrumbs_as_list": django.VERSION >= (6, 0),
    }
    request.current_app = site
    return TemplateResponse(request, TEMPLATE, context)
