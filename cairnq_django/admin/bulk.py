"""Retry or cancel every task matching a filter, as one server-side operation the workers advance.

``confirm`` (GET) shows how many tasks the filter matches, by status and
what happens to each; its POST creates a ``BulkOperation`` and redirects to
``progress``, which refreshes itself (``?fragment=progress``, the dashboard's
script; a reload without JavaScript) until the operation is done. Worker
housekeeping does the work in chunks (``worker/bulk_operations.py``), so the
page may be closed: the operation runs on. ``cancel`` stops an open one.

The permissions are the list actions': the task view permission and the
action's own (``retry_task`` or ``cancel_task``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import django
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from .confirmation import CANCEL, RETRY, RETRY_RESET, Confirmable
from .values import storable_text
from ..client.task_filter import FILTER_KEYS, filter_of, matching_tasks
from ..models import BulkAction, BulkOperation, BulkState, OPEN_BULK_STATES, Task, TaskStatus, Worker
from ..store import get_store

if TYPE_CHECKING:
    from .task_admin import TaskAdmin

# The progress page's script fetches the figures again this often.
REFRESH_MS = 2_000
FRAGMENT = "progress"
# Query parameters of the task list that are no filter (order, page): a list with only these and filter keys can act.
NEUTRAL_PARAMS = ("o", "p")

KINDS: dict[str, Confirmable] = {BulkAction.RETRY: RETRY, BulkAction.RETRY_RESET: RETRY_RESET, BulkAction.CANCEL: CANCEL}
FILTER_LABELS = {
    "status": gettext_lazy("status"),
    "queue": gettext_lazy("queue"),
    "name": gettext_lazy("name"),
    "error_type": gettext_lazy("error type"),
    "error_message": gettext_lazy("error message starts with"),
}


def may_act(model_admin: TaskAdmin, request: HttpRequest, action: str) -> bool:
    if not model_admin.has_view_permission(request):
        return False
    if action == BulkAction.CANCEL:
        return model_admin.has_cancel_permission(request)
    return model_admin.has_retry_permission(request)


def bulk_query(params: Any) -> str | None:
    """The filter part of a task-list query a bulk operation can carry, or None when the list has another filter."""
    if any(key not in FILTER_KEYS and key not in NEUTRAL_PARAMS for key in params):
        return None
    spec = filter_of(params)
    if not spec or not all(storable_text(value) for value in spec.values()):
        return None
    return urlencode(spec)


def _described(spec: dict[str, Any]) -> list[tuple[str, str]]:
    return [(str(FILTER_LABELS.get(key, key)), str(value)) for key, value in spec.items()]


def _context(model_admin: TaskAdmin, request: HttpRequest, title: str) -> dict[str, Any]:
    return {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "opts": model_admin.opts,
        "changelist_url": reverse(f"{model_admin.admin_site.name}:cairnq_task_changelist"),
        "dashboard_url": reverse(f"{model_admin.admin_site.name}:cairnq_task_dashboard"),
        "breadcrumbs_as_list": django.VERSION >= (6, 0),
    }


def confirm(model_admin: TaskAdmin, request: HttpRequest) -> HttpResponse:
    """Show what the operation would do (GET); start it (POST)."""
    source = request.POST if request.method == "POST" else request.GET
    action = source.get("action", "")
    if action not in KINDS:
        raise Http404
    if not may_act(model_admin, request, action):
        raise PermissionDenied
    spec = filter_of(source)
    if not spec or not all(storable_text(value) for value in spec.values()):
        messages.warning(request, _("Choose a filter first: a bulk operation acts on a filtered list."))
        return HttpResponseRedirect(reverse(f"{model_admin.admin_site.name}:cairnq_task_changelist"))
    store = get_store()
    tasks = matching_tasks(spec, Task.objects.using(store.alias))
    if request.method == "POST":
        now_ms = store.now_ms()
        operation = BulkOperation.objects.using(store.alias).create(
            action=action,
            filter=spec,
            requested_by_pk=str(request.user.pk),
            requested_by=request.user.get_username(),
            matched=tasks.count(),
            created_at_ms=now_ms,
            updated_at_ms=now_ms,
        )
        return HttpResponseRedirect(
            reverse(f"{model_admin.admin_site.name}:cairnq_task_bulk_progress", args=[operation.pk])
        )
    kind = KINDS[action]
    counts = {row["status"]: row["n"] for row in tasks.order_by().values("status").annotate(n=Count("pk"))}
    rows = [
        {
            "status": status,
            "label": TaskStatus(status).label if status in TaskStatus.values else status,
            "count": count,
            "fate": kind.fates.get(status, _("skipped: not a protocol status")),
            "changes": status in kind.changing,
        }
        for status, count in sorted(counts.items(), key=lambda item: _status_order(item[0]))
    ]
    query = urlencode(spec)
    context = {
        **_context(model_admin, request, str(kind.title) + " — " + _("all matching")),
        "kind": kind,
        "action": action,
        "spec": spec,
        "described": _described(spec),
        "rows": rows,
        "total": sum(counts.values()),
        "changing": sum(row["count"] for row in rows if row["changes"]),
        "back_url": reverse(f"{model_admin.admin_site.name}:cairnq_task_changelist") + "?" + query,
        "live_workers": _live_workers(store),
    }
    return TemplateResponse(request, "admin/cairnq/bulk_confirm.html", context)


def _status_order(status: str) -> int:
    return TaskStatus.values.index(status) if status in TaskStatus.values else len(TaskStatus.values)


def _live_workers(store: Any) -> int:
    return Worker.objects.using(store.alias).live(store.now_ms()).count()


@dataclass
class Progress:
    """What the progress page shows of one operation."""

    operation: BulkOperation
    live_workers: int

    @property
    def total(self) -> int:
        return max(self.operation.matched, self.operation.processed)

    @property
    def percent(self) -> int:
        if self.operation.state == BulkState.DONE or self.total == 0:
            return 100 if self.operation.state == BulkState.DONE else 0
        return min(99, self.operation.processed * 100 // self.total)


def progress(model_admin: TaskAdmin, request: HttpRequest, pk: int) -> HttpResponse:
    """The operation's page: state, done/total, and a Cancel button while it is open."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    store = get_store()
    operation = get_object_or_404(BulkOperation.objects.using(store.alias), pk=pk)
    shown = Progress(operation, _live_workers(store))
    context = {
        **_context(model_admin, request, _("Bulk operation #%(pk)s") % {"pk": operation.pk}),
        "operation": operation,
        "progress": shown,
        "described": _described(operation.filter if isinstance(operation.filter, dict) else {}),
        "list_url": reverse(f"{model_admin.admin_site.name}:cairnq_task_changelist")
        + "?"
        + urlencode(operation.filter if isinstance(operation.filter, dict) else {}),
        "cancel_url": reverse(f"{model_admin.admin_site.name}:cairnq_task_bulk_cancel", args=[operation.pk]),
        "can_cancel": operation.is_open and may_act(model_admin, request, operation.action),
        "refresh_ms": REFRESH_MS,
        "fragment": FRAGMENT,
    }
    if request.GET.get("fragment") == FRAGMENT:
        response = TemplateResponse(request, "admin/cairnq/bulk_progress_live.html", context)
        response["X-Cairnq-Fragment"] = FRAGMENT
        return response
    return TemplateResponse(request, "admin/cairnq/bulk_progress.html", context)


# Operations the dashboard lists: every open one and those ended this recently (at most RECENT_SHOWN).
RECENT_MS = 600_000
RECENT_SHOWN = 5


def recent_operations(alias: str, now_ms: int) -> list[BulkOperation]:
    """Open operations and those ended in the last ``RECENT_MS``, newest first (one query, the state index)."""
    return list(
        BulkOperation.objects.using(alias)
        .filter(Q(state__in=OPEN_BULK_STATES) | Q(finished_at_ms__gte=now_ms - RECENT_MS))
        .order_by("-id")[:RECENT_SHOWN]
    )


def cancel(model_admin: TaskAdmin, request: HttpRequest, pk: int) -> HttpResponse:
    """Stop an open operation (POST); rows it already changed stay changed."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    store = get_store()
    operation = get_object_or_404(BulkOperation.objects.using(store.alias), pk=pk)
    if not may_act(model_admin, request, operation.action):
        raise PermissionDenied
    now_ms = store.now_ms()
    stopped = (
        BulkOperation.objects.using(store.alias)
        .filter(pk=pk, state__in=OPEN_BULK_STATES)
        .update(state=BulkState.CANCELED, finished_at_ms=now_ms, updated_at_ms=now_ms)
    )
    if stopped:
        messages.success(request, _("Operation canceled; the tasks it already changed stay changed."))
    else:
        messages.warning(request, _("The operation had already ended."))
    return HttpResponseRedirect(reverse(f"{model_admin.admin_site.name}:cairnq_task_bulk_progress", args=[pk]))
