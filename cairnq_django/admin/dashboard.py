"""The queue dashboard: per-queue figures and controls on one page, and its entry on the admin index."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import django
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import connections
from django.db.models import Count, F, Field, Min, Q
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.formats import number_format
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from .bulk import recent_operations
from .charts import peak_per_minute, throughput_svg
from .index_blind import IndexBlind
from .queue_controls import ShownControl, shown_controls
from .sidebar import dashboard_sidebar_request
from .throughput import QueueHour, last_hour, quantile_text
from .triage import TopError, top_errors
from .values import EMPTY, odd_time, stored_datetime
from ..client import pauses
from ..models import (
    LIVE_STATUSES, TERMINAL_STATUSES, QueueDashboard, QueuePause, Task, TaskStatus, ms_to_datetime,
)
from ..store import get_store

if TYPE_CHECKING:
    from .task_admin import TaskAdmin

# "Leases about to expire" on the dashboard.
LEASE_WARNING_MS = 10_000
FAILURE_WINDOW_MS = 3_600_000
# A queue's finished tasks are counted up to this many per status; more shows as "1,000+".
TERMINAL_COUNT_CAP = 1_000
# How often the page's script (static/cairnq/dashboard.js) fetches the live region again.
REFRESH_MS = 5_000
# ?fragment=queues answers the live region alone, for that script.
FRAGMENT = "queues"


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
    # Registered workers of this app serving the queue and refreshed lately (the registry).
    live_workers: int = 0
    oldest_queued_age: str = "—"
    oldest_due_age: str = "—"
    # The pause in force (None: the queue is active), and the controls this user sees on the card.
    pause: QueuePause | None = None
    controls: list[ShownControl] = field(default_factory=list)
    # The last hour from the workers' per-minute history, and its chart.
    hour: QueueHour | None = None
    chart: SafeString | None = None
    peak: int = 0
    pickup_p50: str = EMPTY
    pickup_p95: str = EMPTY
    # The last hour's most frequent errors (the workers' error counts).
    errors: list[TopError] = field(default_factory=list)

    @property
    def status_counts(self) -> list[tuple[str, str, str]]:
        """(status, label, count as shown): a capped finished count reads "1,000+"."""
        shown = []
        for status in TaskStatus:
            count = self.counts.get(status.value, 0)
            text = number_format(count, force_grouping=True)
            if status.value in TERMINAL_STATUSES and count >= TERMINAL_COUNT_CAP:
                text += "+"
            shown.append((status.value, str(status.label), text))
        return shown


def queue_rows(now_ms: int, alias: str) -> list[QueueRow]:
    """Gather the dashboard's figures per queue.

    Nothing here reads the terminal rows whole: the queues and their queued
    and running counts come from ``store.queue_overview()`` (the metrics
    view's reading), the finished counts from ``store.terminal_counts()``,
    which stops counting at ``TERMINAL_COUNT_CAP``. The other figures read
    only live rows or the last hour's failures, each through an index the
    protocol ships. A paused queue, or one a live worker serves, has a card
    even when it holds no task.
    """
    store = get_store()
    overview = store.queue_overview()
    terminal = store.terminal_counts([item.queue for item in overview], TERMINAL_COUNT_CAP)
    rows = {
        item.queue: QueueRow(
            item.queue,
            {TaskStatus.QUEUED.value: item.queued, TaskStatus.RUNNING.value: item.running, **terminal[item.queue]},
        )
        for item in overview
    }
    tasks = Task.objects.using(alias)

    def row(queue: str) -> QueueRow:
        if queue not in rows:
            rows[queue] = QueueRow(queue, {})
        return rows[queue]

    for pause in pauses.paused_queues():
        row(pause.queue).pause = pause
    for item in overview:
        rows[item.queue].live_workers = item.live_workers

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
    for oldest in queued:
        row(oldest["queue"]).oldest_queued_ms = oldest["oldest"]
        row(oldest["queue"]).oldest_due_ms = oldest["oldest_due"]

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

    # SQLite would rather walk every row of a status in queue order (the claim
    # index) than sort a few by queue; grouping on +queue takes the narrower index.
    queue_group = IndexBlind(F("queue")) if connections[alias].vendor == "sqlite" else F("queue")
    requested = (
        tasks.filter(status=TaskStatus.RUNNING, cancel_requested_at_ms__isnull=False)
        .annotate(grouped_queue=queue_group)
        .values("grouped_queue")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for pending in requested:
        row(pending["grouped_queue"]).cancel_requested = pending["n"]

    # Through the (status, completed_at_ms) index: the last hour's failures only.
    failures = (
        tasks.filter(status=TaskStatus.FAILED, completed_at_ms__gte=now_ms - FAILURE_WINDOW_MS)
        .annotate(grouped_queue=queue_group)
        .values("grouped_queue")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for failure in failures:
        row(failure["grouped_queue"]).failed_last_hour = failure["n"]
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
    """Render the queue dashboard (needs the task view permission; each control, its own)."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    store = get_store()
    now_ms = store.now_ms()
    rows = queue_rows(now_ms, store.alias)
    hours = last_hour([item.queue for item in rows], now_ms, store.alias)
    errors = top_errors([item.queue for item in rows], now_ms, store.alias)
    for item in rows:
        item.hour = hours[item.queue]
        item.errors = errors.get(item.queue, [])
        item.chart = throughput_svg(item.hour)
        item.peak = peak_per_minute(item.hour)
        item.pickup_p50 = quantile_text(item.hour, 0.5)
        item.pickup_p95 = quantile_text(item.hour, 0.95)
        item.oldest_queued_age = _age(now_ms, item.oldest_queued_ms)
        item.oldest_due_age = _age(now_ms, item.oldest_due_ms)
        item.controls = shown_controls(model_admin, request, item)
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
        "operations": [
            (operation, reverse(f"{model_admin.admin_site.name}:cairnq_task_bulk_progress", args=[operation.pk]))
            for operation in recent_operations(store.alias, now_ms)
        ],
        "bulk_url": reverse(f"{model_admin.admin_site.name}:cairnq_task_bulk"),
        "can_bulk_retry": model_admin.has_retry_permission(request),
        "workers_url": reverse(f"{model_admin.admin_site.name}:cairnq_worker_changelist"),
        "lease_warning_s": LEASE_WARNING_MS // 1000,
        "now": ms_to_datetime(now_ms),
        # Django 6 draws breadcrumbs as a list; 5.2 styles its <div>.
        "breadcrumbs_as_list": django.VERSION >= (6, 0),
        "refresh_ms": REFRESH_MS,
        "refresh_s": REFRESH_MS // 1000,
        # The sidebar marks "Queue dashboard", not "Tasks" (whose URLs this page is under).
        "sidebar_request": dashboard_sidebar_request(
            request, model_admin.admin_site.name, model_admin.opts.app_label
        ),
    }
    if request.GET.get("fragment") == FRAGMENT:
        response = TemplateResponse(request, "admin/cairnq/dashboard_live.html", context)
        # The script swaps in only an answer that says it is the fragment (not a login page).
        response["X-Cairnq-Fragment"] = FRAGMENT
        return response
    return TemplateResponse(request, "admin/cairnq/dashboard.html", context)


@admin.register(QueueDashboard)
class QueueDashboardEntry(admin.ModelAdmin):
    """Link the admin index to the dashboard; anyone who may view tasks may open it."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("cairnq.view_task")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("cairnq.view_task")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(reverse(f"{self.admin_site.name}:cairnq_task_dashboard"))
