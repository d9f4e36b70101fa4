"""The workers list and a worker's page: the registry (``cairnq_django_worker``) read-only.

Each page reads "now" once from the store (the database clock on
PostgreSQL, the one the rows were stamped with) and lets the database say
which workers are live, lost or stopped, so the state filter and the
column agree. A worker's page lists its running tasks through the lease
index (only running rows are read), never a scan of the task table; its
throughput comes from the counters its heartbeat writes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from .values import EMPTY, number_text, time_text
from ..models import Worker, WorkerState
from ..store import get_store

# Running tasks listed on a worker's page; its concurrency (and claim-ahead) bound them anyway.
RUNNING_SHOWN = 100


class WorkerStateFilter(admin.SimpleListFilter):
    """Filter by state from the fixed list; unfiltered shows every registered worker."""

    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return list(WorkerState.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Worker]) -> QuerySet[Worker]:
        value = self.value()
        if value in WorkerState.values:
            return queryset.in_states([value])  # type: ignore[attr-defined]  # a WorkerQuerySet
        return queryset


def _joined(values: Any) -> str:
    if isinstance(values, dict):
        return ", ".join(f"{name}={capacity}" for name, capacity in sorted(values.items())) or EMPTY
    if isinstance(values, list):
        return ", ".join(str(value) for value in values) or EMPTY
    return EMPTY if values is None else str(values)


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    """Read-only workers list and detail."""

    # What fits beside the filter in a 1,400 px window (the state says how
    # recently it was seen); pid, version, times and names are on its page.
    list_display = (
        "id",
        "state_badge",
        "host",
        "queues_text",
        "load",
        "rate",
        "settled",
    )
    list_filter = (WorkerStateFilter,)
    search_fields = ("id", "host")
    search_help_text = _("Worker id or host (part of either).")
    ordering = ("-started_at_ms", "-id")
    list_per_page = 100
    show_facets = admin.ShowFacets.NEVER
    readonly_fields = (
        "id",
        "state_badge",
        "host",
        "pid",
        "version",
        "queues_text",
        "names_text",
        "concurrency",
        "resources_text",
        "global_resources_text",
        "heartbeat_interval_ms",
        "started_display",
        "last_seen_display",
        "stopped_display",
        "in_flight",
        "throughput",
        "running_tasks",
    )
    fieldsets = (
        (None, {"fields": ("id", "state_badge", "host", "pid", "version")}),
        (
            _("Serves"),
            {"fields": ("queues_text", "names_text", "concurrency", "resources_text", "global_resources_text")},
        ),
        (
            _("Heartbeat"),
            {"fields": ("heartbeat_interval_ms", "started_display", "last_seen_display", "stopped_display")},
        ),
        (_("Work"), {"fields": ("in_flight", "throughput", "running_tasks")}),
    )

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": ("cairnq/admin.css",)}

    # ---- permissions: rows change only through the workers ------------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Worker | None = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        store = get_store()
        queryset: QuerySet[Worker] = super().get_queryset(request).using(store.alias)
        return queryset.with_state(store.now_ms())  # type: ignore[attr-defined]

    # ---- columns -------------------------------------------------------
    @admin.display(description=_("state"), ordering="state_now")
    def state_badge(self, obj: Worker) -> SafeString:
        state = getattr(obj, "state_now", None) or obj.state(get_store().now_ms())
        label = WorkerState(state).label
        return format_html('<span class="cairnq-badge cairnq-badge--worker-{}">{}</span>', state, label)

    @admin.display(description=_("in flight"), ordering="in_flight")
    def load(self, obj: Worker) -> str:
        return f"{obj.in_flight} / {obj.concurrency}"

    @admin.display(description=_("per min"), ordering="per_minute")
    def rate(self, obj: Worker) -> str:
        return f"{obj.per_minute:.1f}"

    @admin.display(description=_("ok · failed"))
    def settled(self, obj: Worker) -> str:
        return f"{number_text(obj.succeeded)} · {number_text(obj.failed)}"

    @admin.display(description=_("queues"))
    def queues_text(self, obj: Worker) -> str:
        return _joined(obj.queues)

    @admin.display(description=_("names served"))
    def names_text(self, obj: Worker) -> str:
        return _joined(obj.names)

    @admin.display(description=_("resources"))
    def resources_text(self, obj: Worker) -> str:
        return _joined(obj.resources)

    @admin.display(description=_("global resources"))
    def global_resources_text(self, obj: Worker) -> str:
        return _joined(obj.global_resources)

    # Read-only fields show a datetime as str() gives it ("…26.384000+00:00"):
    # every time here is spelled as the task pages spell theirs ("…26.384 UTC").
    @admin.display(description=_("started"), ordering="started_at_ms")
    def started_display(self, obj: Worker) -> SafeString | str:
        return time_text(obj.started_at_ms)

    @admin.display(description=_("last seen"), ordering="last_seen_at_ms")
    def last_seen_display(self, obj: Worker) -> SafeString | str:
        return time_text(obj.last_seen_at_ms)

    @admin.display(description=_("stopped"))
    def stopped_display(self, obj: Worker) -> SafeString | str:
        return time_text(obj.stopped_at_ms)

    # ---- detail page ---------------------------------------------------
    @admin.display(description=_("throughput"))
    def throughput(self, obj: Worker) -> SafeString:
        ended = obj.succeeded + obj.failed
        minutes = max(obj.last_seen_at_ms - obj.started_at_ms, 1) / 60_000
        return format_html(
            "{} {} · {} {} · {} {} · {} {}",
            f"{obj.per_minute:.1f}",
            _("attempts per minute over the last minute"),
            f"{ended / minutes:.1f}",
            _("per minute since start-up"),
            number_text(obj.succeeded),
            _("succeeded"),
            number_text(obj.failed),
            _("failed or retried"),
        )

    @admin.display(description=_("running tasks"))
    def running_tasks(self, obj: Worker) -> SafeString | str:
        tasks = get_store().worker_tasks(obj.id, limit=RUNNING_SHOWN)
        if not tasks:
            return EMPTY
        site = self.admin_site.name
        rows = format_html_join(
            "",
            '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>',
            (
                (reverse(f"{site}:cairnq_task_change", args=[task.id]), task.id, task.name, task.queue,
                 time_text(task.lease_until_ms))
                for task in tasks
            ),
        )
        head = format_html(
            "<tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr>", _("task"), _("name"), _("queue"), _("lease until")
        )
        return format_html('<table class="cairnq-worker-tasks">{}{}</table>', head, rows)
