"""Cancel and retry from the admin: the changelist's actions and the detail page's buttons.

Both go through the store's ``cancel_many`` / ``retry_many``, the same guarded
statements the Python API uses, fed a bounded chunk of ids at a time: acting on
10,000 selected tasks costs a few dozen statements, never one per row. Each
chunk's changed rows go to the admin log in one INSERT (``audit``), and an
action over more than one task asks first (``confirmation``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from .audit import log_task_changes
from .confirmation import CANCEL, RETRY, RETRY_RESET, confirmation_page, needs_confirmation
from .values import storable_text
from ..models import Task, TaskStatus
from ..store import get_store

if TYPE_CHECKING:
    from .task_admin import TaskAdmin

# Ids handed to one cancel_many / retry_many statement.
CHUNK_SIZE = 1000


@admin.action(permissions=["cancel"], description=gettext_lazy("Cancel selected tasks"))
def cancel_tasks(model_admin: TaskAdmin, request: HttpRequest, queryset: QuerySet[Task]) -> HttpResponse | None:
    """Cancel the selection (or every filtered row), once confirmed if it is more than one task."""
    if needs_confirmation(request, queryset):
        return confirmation_page(model_admin, request, queryset, CANCEL)
    outcome = cancel_ids(id_chunks(queryset), logged_by=request.user.pk)
    _report(request, outcome, cancel_message(outcome))
    return None


@admin.action(permissions=["retry"], description=gettext_lazy("Retry selected tasks"))
def retry_tasks(model_admin: TaskAdmin, request: HttpRequest, queryset: QuerySet[Task]) -> HttpResponse | None:
    """Re-queue the failed and canceled tasks of the selection."""
    return _retry(model_admin, request, queryset, reset_attempt=False)


@admin.action(permissions=["retry"], description=gettext_lazy("Retry selected tasks, resetting attempts"))
def retry_tasks_reset_attempts(
    model_admin: TaskAdmin, request: HttpRequest, queryset: QuerySet[Task]
) -> HttpResponse | None:
    """Re-queue them with the attempt count back at zero."""
    return _retry(model_admin, request, queryset, reset_attempt=True)


def _retry(
    model_admin: TaskAdmin, request: HttpRequest, queryset: QuerySet[Task], *, reset_attempt: bool
) -> HttpResponse | None:
    if needs_confirmation(request, queryset):
        return confirmation_page(model_admin, request, queryset, RETRY_RESET if reset_attempt else RETRY)
    outcome = retry_ids(id_chunks(queryset), reset_attempt=reset_attempt, logged_by=request.user.pk)
    _report(request, outcome, retry_message(outcome, reset_attempt=reset_attempt))
    return None


def id_chunks(queryset: QuerySet[Task], size: int = CHUNK_SIZE) -> Iterator[list[str]]:
    """Yield the queryset's ids in primary-key order, ``size`` at a time.

    Keyset pagination (``id > last``) keeps every SELECT bounded and never
    holds a cursor open across the writes made between chunks.
    """
    base = queryset.order_by("pk")
    last: str | None = None
    while True:
        page = base if last is None else base.filter(pk__gt=last)
        ids = [str(pk) for pk in page.values_list("pk", flat=True)[:size]]
        if not ids:
            return
        yield ids
        if len(ids) < size:
            return
        last = ids[-1]


@dataclass
class Outcome:
    """What one cancel or retry did: rows changed by kind, and rows left alone."""

    selected: int = 0
    changed: dict[str, int] = field(default_factory=dict)

    @property
    def changed_total(self) -> int:
        return sum(self.changed.values())

    @property
    def skipped(self) -> int:
        return self.selected - self.changed_total


def cancel_ids(chunks: Iterator[list[str]] | list[list[str]], *, logged_by: int | None = None) -> Outcome:
    """Cancel every id, one ``cancel_many`` per chunk; count canceled vs cancel-requested.

    With ``logged_by`` (a user's pk) each chunk's changed rows are written to
    the admin log, one INSERT per chunk.
    """
    store = get_store()
    outcome = Outcome(changed={"canceled": 0, "requested": 0})
    for ids in chunks:
        outcome.selected += len(ids)
        entries = []
        for row in store.cancel_many(ids):
            requested = row.status == TaskStatus.RUNNING
            outcome.changed["requested" if requested else "canceled"] += 1
            entries.append((row, _("Cancel requested.") if requested else _("Canceled.")))
        if logged_by is not None:
            log_task_changes(logged_by, entries)
    return outcome


def retry_ids(
    chunks: Iterator[list[str]] | list[list[str]], *, reset_attempt: bool, logged_by: int | None = None
) -> Outcome:
    """Re-queue every failed or canceled id, one ``retry_many`` per chunk (logged as ``cancel_ids`` is)."""
    store = get_store()
    outcome = Outcome(changed={"queued": 0})
    message = _("Re-queued, attempts reset.") if reset_attempt else _("Re-queued.")
    for ids in chunks:
        outcome.selected += len(ids)
        rows = store.retry_many(ids, reset_attempt=reset_attempt)
        outcome.changed["queued"] += len(rows)
        if logged_by is not None:
            log_task_changes(logged_by, ((row, message) for row in rows))
    return outcome


def cancel_message(outcome: Outcome) -> str:
    """Say what a cancel did, e.g. "3 canceled, 1 cancel requested, 2 skipped: already finished"."""
    canceled, requested = outcome.changed["canceled"], outcome.changed["requested"]
    parts: list[str] = []
    # "0 canceled" only when nothing else happened either; it reads as noise next to a request.
    if canceled or not requested:
        parts.append(ngettext("%(count)d canceled", "%(count)d canceled", canceled) % {"count": canceled})
    if requested:
        parts.append(
            ngettext("%(count)d cancel requested", "%(count)d cancels requested", requested) % {"count": requested}
        )
    if outcome.skipped:
        parts.append(
            ngettext("%(count)d skipped: already finished", "%(count)d skipped: already finished", outcome.skipped)
            % {"count": outcome.skipped}
        )
    return ", ".join(parts)


def retry_message(outcome: Outcome, *, reset_attempt: bool) -> str:
    """Say what a retry did, e.g. "2 re-queued (attempts reset), 1 skipped: not failed or canceled"."""
    queued = outcome.changed["queued"]
    if reset_attempt:
        head = ngettext(
            "%(count)d re-queued (attempts reset)", "%(count)d re-queued (attempts reset)", queued
        ) % {"count": queued}
    else:
        head = ngettext("%(count)d re-queued", "%(count)d re-queued", queued) % {"count": queued}
    parts = [head]
    if outcome.skipped:
        parts.append(
            ngettext(
                "%(count)d skipped: not failed or canceled", "%(count)d skipped: not failed or canceled", outcome.skipped
            )
            % {"count": outcome.skipped}
        )
    return ", ".join(parts)


def _report(request: HttpRequest, outcome: Outcome, text: str) -> None:
    level = messages.SUCCESS if outcome.changed_total else messages.WARNING
    messages.add_message(request, level, text)


def _back_to_task(model_admin: TaskAdmin, object_id: str) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse(f"{model_admin.admin_site.name}:cairnq_task_change", args=[object_id]))


def _check_button(model_admin: TaskAdmin, request: HttpRequest, object_id: str, may_act: bool) -> None:
    """Refuse what the changelist's action would refuse, and an id no row can hold.

    The list's actions need the view permission (to see the list) and the
    action's own; a button's URL is reachable without the page, so it checks both.
    """
    if not (model_admin.has_view_permission(request) and may_act):
        raise PermissionDenied
    if not storable_text(object_id):
        raise Http404


def cancel_one(model_admin: TaskAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """Handle the detail page's Cancel button (POST only; ``view_task`` and ``cancel_task``)."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    _check_button(model_admin, request, object_id, model_admin.has_cancel_permission(request))
    outcome = cancel_ids([[object_id]], logged_by=request.user.pk)
    _report(request, outcome, cancel_message(outcome))
    return _back_to_task(model_admin, object_id)


def retry_one(model_admin: TaskAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """Handle the detail page's Retry buttons (POST only; ``view_task`` and ``retry_task``)."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    _check_button(model_admin, request, object_id, model_admin.has_retry_permission(request))
    reset_attempt = request.POST.get("reset_attempt") == "1"
    outcome = retry_ids([[object_id]], reset_attempt=reset_attempt, logged_by=request.user.pk)
    _report(request, outcome, retry_message(outcome, reset_attempt=reset_attempt))
    return _back_to_task(model_admin, object_id)
