"""Views behind the task admin: bulk and single cancel/retry, and the queue dashboard.

Cancel and retry go through the store's ``cancel_many`` / ``retry_many``, the
same guarded statements the Python API uses, fed a bounded chunk of ids at a
time: acting on 10,000 selected tasks costs a few dozen statements, never one
per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Field, Min, Q, QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from .values import EMPTY, odd_time, storable_text, stored_datetime
from ..models import LIVE_STATUSES, TERMINAL_STATUSES, Task, TaskStatus, ms_to_datetime

if TYPE_CHECKING:
    from . import TaskAdmin

# Ids handed to one cancel_many / retry_many statement.
CHUNK_SIZE = 1000
# "Leases about to expire" on the dashboard.
LEASE_WARNING_MS = 10_000
FAILURE_WINDOW_MS = 3_600_000


def _store() -> Any:
    from ..store import get_store

    return get_store()


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


def cancel_ids(chunks: Iterator[list[str]] | list[list[str]]) -> Outcome:
    """Cancel every id, one ``cancel_many`` per chunk; count canceled vs cancel-requested."""
    store = _store()
    outcome = Outcome(changed={"canceled": 0, "requested": 0})
    for ids in chunks:
        outcome.selected += len(ids)
        for row in store.cancel_many(ids):
            outcome.changed["requested" if row.status == TaskStatus.RUNNING else "canceled"] += 1
    return outcome


def retry_ids(chunks: Iterator[list[str]] | list[list[str]], *, reset_attempt: bool) -> Outcome:
    """Re-queue every failed or canceled id, one ``retry_many`` per chunk."""
    store = _store()
    outcome = Outcome(changed={"queued": 0})
    for ids in chunks:
        outcome.selected += len(ids)
        outcome.changed["queued"] += len(store.retry_many(ids, reset_attempt=reset_attempt))
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


def cancel_queryset(model_admin: TaskAdmin, request: HttpRequest, queryset: QuerySet[Task]) -> None:
    """Run the bulk cancel action over the selection (or every filtered row)."""
    outcome = cancel_ids(id_chunks(queryset))
    _report(request, outcome, cancel_message(outcome))


def retry_queryset(
    model_admin: TaskAdmin, request: HttpRequest, queryset: QuerySet[Task], *, reset_attempt: bool
) -> None:
    """Run the bulk retry action over the selection (or every filtered row)."""
    outcome = retry_ids(id_chunks(queryset), reset_attempt=reset_attempt)
    _report(request, outcome, retry_message(outcome, reset_attempt=reset_attempt))


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
    outcome = cancel_ids([[object_id]])
    _report(request, outcome, cancel_message(outcome))
    return _back_to_task(model_admin, object_id)


def retry_one(model_admin: TaskAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """Handle the detail page's Retry buttons (POST only; ``view_task`` and ``retry_task``)."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    _check_button(model_admin, request, object_id, model_admin.has_retry_permission(request))
    reset_attempt = request.POST.get("reset_attempt") == "1"
    outcome = retry_ids([[object_id]], reset_attempt=reset_attempt)
    _report(request, outcome, retry_message(outcome, reset_attempt=reset_attempt))
    return _back_to_task(model_admin, object_id)


@dataclass
class QueueRow:
    """One queue's line on the dashboard."""

    queue: str
    counts: dict[str, int]
    cancel_requested: int = 0
    oldest_queued_ms: int | None = None
    oldest_due_ms: int | None = None
    leases_expiring: int = 0
    leases_expired: int = 0
    failed_last_hour: int = 0
    oldest_queued_age: str = "—"
    oldest_due_age: str = "—"

    @property
    def status_counts(self) -> list[tuple[str, str, int]]:
        return [(status.value, str(status.label), self.counts.get(status.value, 0)) for status in TaskStatus]


def queue_rows(now_ms: int, alias: str) -> list[QueueRow]:
    """Gather the dashboard's figures per queue.

    Counts come from ``store.stats()`` (one grouped read over the table, as
    the protocol's dashboard read). The other figures read only live rows or
    the last hour's failures, each through an index the protocol ships.
    """
    rows = {queue: QueueRow(queue, dict(counts)) for queue, counts in _store().stats().items()}
    tasks = Task.objects.using(alias)

    def row(queue: str) -> QueueRow:
        if queue not in rows:
            rows[queue] = QueueRow(queue, {})
        return rows[queue]

    queued = (
        tasks.filter(status=TaskStatus.QUEUED)
        .values("queue")
        .annotate(
            # Field(): the value as stored, not int()-converted, so text a
            # foreign writer put in a SQLite integer column reaches the page.
            oldest=Min("created_at_ms", output_field=Field()),
            oldest_due=Min("run_at_ms", filter=Q(run_at_ms__lte=now_ms), output_field=Field()),
        )
        .order_by()
    )
    for item in queued:
        row(item["queue"]).oldest_queued_ms = item["oldest"]
        row(item["queue"]).oldest_due_ms = item["oldest_due"]

    # Repeat the lease index's predicate (status running, lease not null) so SQLite uses it.
    leases = (
        tasks.filter(status=TaskStatus.RUNNING, lease_until_ms__isnull=False, lease_until_ms__lte=now_ms + LEASE_WARNING_MS)
        .values("queue")
        .annotate(
            expiring=Count("pk", filter=Q(lease_until_ms__gt=now_ms)),
            expired=Count("pk", filter=Q(lease_until_ms__lte=now_ms)),
        )
        .order_by()
    )
    for lease in leases:
        row(lease["queue"]).leases_expiring = lease["expiring"]
        row(lease["queue"]).leases_expired = lease["expired"]

    requested = (
        tasks.filter(status=TaskStatus.RUNNING, cancel_requested_at_ms__isnull=False)
        .values("queue")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for pending in requested:
        row(pending["queue"]).cancel_requested = pending["n"]

    failures = (
        tasks.filter(status=TaskStatus.FAILED, completed_at_ms__gte=now_ms - FAILURE_WINDOW_MS)
        .values("queue")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for failure in failures:
        row(failure["queue"]).failed_last_hour = failure["n"]
    return [rows[name] for name in sorted(rows)]


def _age(now_ms: int, then_ms: Any) -> str:
    """Render a duration as "3 d 4 h", "12 min 5 s" or "800 ms"; an odd stored time is marked."""
    if then_ms is None:
        return EMPTY
    if stored_datetime(then_ms) is None:
        return odd_time(then_ms)
    delta = max(now_ms - then_ms, 0)
    if delta < 1000:
        return f"{delta} ms"
    seconds = delta // 1000
    units = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))
    parts: list[str] = []
    for label, size in units:
        if seconds >= size or (parts and len(parts) < 2):
            parts.append(f"{seconds // size} {label}")
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(parts)


def dashboard(model_admin: TaskAdmin, request: HttpRequest) -> HttpResponse:
    """Render the queue dashboard (needs the task view permission)."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    store = _store()
    now_ms = store.now_ms()
    rows = queue_rows(now_ms, store.alias)
    for item in rows:
        item.oldest_queued_age = _age(now_ms, item.oldest_queued_ms)
        item.oldest_due_age = _age(now_ms, item.oldest_due_ms)
    totals = {status: sum(item.counts.get(status, 0) for item in rows) for status in TaskStatus.values}
    changelist = reverse(f"{model_admin.admin_site.name}:cairnq_task_changelist")
    context = {
        **model_admin.admin_site.each_context(request),
        "title": _("Queue dashboard"),
        "opts": model_admin.opts,
        "rows": rows,
        "statuses": [(status.value, status.label) for status in TaskStatus],
        "totals": totals,
        "live_statuses": LIVE_STATUSES,
        "terminal_statuses": TERMINAL_STATUSES,
        "changelist_url": changelist,
        "lease_warning_s": LEASE_WARNING_MS // 1000,
        "now": ms_to_datetime(now_ms),
    }
    return TemplateResponse(request, "admin/cairnq/dashboard.html", context)
