"""The operators' view of the queue: a read-only task admin with cancel and retry.

Rows change only through the store's operations, so the admin grants no add,
change or delete permission. Everything here must stay cheap on a million rows:
no exact ``COUNT(*)`` per page view, no filter choice list built from the
table, exact-match search that the protocol's indexes can answer.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from . import bulk
from .actions import cancel_one, cancel_tasks, retry_one, retry_tasks, retry_tasks_reset_attempts
from .cells import TITLE_CHARS, attempt_html, clipped, no_handler_badge, status_html, task_html, when_text
from .dashboard import dashboard
from .filters import ErrorMessageFilter, ErrorTypeFilter, HandlerFilter, NameFilter, QueueFilter, StatusFilter
from .paginator import EstimatedCountPaginator
from .queue_controls import run_control
from .preview import PreviewChangeList, compact_json, preview_from_head, with_payload_head
from .values import EMPTY, number_text, odd_progress, pretty_json, progress_fraction, storable_text, time_text
from .workflow_admin import task_workflow_link
from ..conf import get_config
from ..models import LIVE_STATUSES, Task, TaskKey, TaskStatus, Worker
from ..tasks.registry import get_task

PREVIEW_CHARS = 60
# The detail page shows whole documents up to this size, then cuts with a note.
DETAIL_CHARS = 100_000


def _alias() -> str:
    return str(get_config()["DATABASE"])


def has_no_handler(task: Task) -> bool:
    """Return True for a live task whose name no handler of this process serves (fault plan F18 b).

    No worker of this deployment claims such a task: it waits for a worker of
    another deployment or SDK, or forever. A dictionary lookup, so the
    changelist stays free of per-row queries.
    """
    return task.status in LIVE_STATUSES and get_task(task.name) is None


def error_summary(error: Any) -> dict[str, Any]:
    """The error envelope's type, code and message, and its stored traceback, for the page's top.

    Only the fields the protocol defines, and only when they are what it says
    they are: an envelope another writer shaped differently shows in full in
    the Data section instead. The traceback is cut like the JSON documents.
    """
    if not isinstance(error, dict):
        return {}
    summary = {
        key: Truncator(value).chars(DETAIL_CHARS)
        for key, value in ((k, error.get(k)) for k in ("type", "code", "message"))
        if isinstance(value, str) and value
    }
    context: dict[str, Any] = {"cairnq_error": summary} if summary else {}
    details = error.get("details")
    traceback = details.get("traceback") if isinstance(details, dict) else None
    if isinstance(traceback, str) and traceback:
        context["cairnq_traceback"] = traceback[:DETAIL_CHARS]
        context["cairnq_traceback_cut"] = len(traceback) > DETAIL_CHARS
    return context


def _without_nul(query: QueryDict) -> QueryDict:
    """Return the query with each NUL replaced by U+FFFD, as a browser's HTML parser would.

    The changelist echoes its parameters into links and hidden inputs, and
    PostgreSQL refuses NUL in a query; the replaced text is ordinary and
    matches no row unless one holds it.
    """
    if not any("\x00" in key or any("\x00" in value for value in values) for key, values in query.lists()):
        return query
    clean = QueryDict(mutable=True)
    for key, values in query.lists():
        clean.setlist(key.replace("\x00", "\ufffd"), [value.replace("\x00", "\ufffd") for value in values])
    clean._mutable = False
    return clean


def _has_perm(request: HttpRequest, perm: str) -> bool:
    user: Any = request.user
    return bool(user.has_perm(perm))


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    """Read-only task list and detail, with permission-gated cancel and retry."""

    # Chosen to fit a 1,400 px window beside both sidebars (cells.py clips
    # long values); priority, worker, due and completion times, result and
    # error are on the task's own page.
    list_display = (
        "task_cell",
        "queue_cell",
        "status_cell",
        "progress_bar",
        "created_display",
        "payload_preview",
    )
    list_display_links = ("task_cell",)
    list_filter = (StatusFilter, HandlerFilter, QueueFilter, NameFilter, ErrorTypeFilter, ErrorMessageFilter)
    # The search box needs a non-empty search_fields; get_search_results does the work.
    search_fields = ("id",)
    search_help_text = _("Exact task id, key, name or correlation id.")
    # Newest first by id: ids are ULIDs, whose order is creation order (protocol
    # 2.3), and the primary key index serves it. Sorting by created_at_ms has
    # no index and costs a full scan per page view (~400 ms at a million rows).
    ordering = ("-id",)
    list_per_page = 50
    list_max_show_all = 200
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    empty_value_display = EMPTY
    actions = [cancel_tasks, retry_tasks, retry_tasks_reset_attempts]
    readonly_fields = (
        "id",
        "name",
        "queue",
        "status_badge",
        "attempts",
        "priority_display",
        "progress_bar",
        "task_key",
        "parent_link",
        "root_link",
        "correlation_id",
        "workflow_link",
        "worker_link",
        "lease_display",
        "timeline",
        "payload_pretty",
        "result_pretty",
        "error_pretty",
        "metadata_pretty",
    )
    fieldsets = (
        (None, {"fields": ("id", "name", "queue", "status_badge", "attempts", "priority_display", "progress_bar")}),
        (_("Lineage"), {"fields": ("task_key", "parent_link", "root_link", "correlation_id", "workflow_link")}),
        (_("Lease"), {"fields": ("worker_link", "lease_display")}),
        (_("Timeline"), {"fields": ("timeline",)}),
        (_("Data"), {"fields": ("payload_pretty", "result_pretty", "error_pretty", "metadata_pretty")}),
    )

    def get_fieldsets(self, request: HttpRequest, obj: Task | None = None) -> Any:
        """The fieldsets, with a task's error envelope first in its section when it has one.

        The summary and traceback already open the page (``error_summary``);
        the whole envelope then comes before payload and result too.
        """
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or obj.error is None:
            return fieldsets
        reordered = []
        for title, options in fieldsets:
            fields = tuple(options.get("fields", ()))
            if "error_pretty" in fields:
                fields = ("error_pretty", *(field for field in fields if field != "error_pretty"))
            reordered.append((title, {**options, "fields": fields}))
        return reordered

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": ("cairnq/admin.css",)}

    # ---- permissions: tasks change only through the store -------------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        return False

    def has_cancel_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        return _has_perm(request, f"{self.opts.app_label}.cancel_task")

    def has_retry_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        return _has_perm(request, f"{self.opts.app_label}.retry_task")

    # ---- queries -------------------------------------------------------
    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return PreviewChangeList

    def get_queryset(self, request: HttpRequest) -> QuerySet[Task]:
        queryset = super().get_queryset(request).using(_alias())
        match = getattr(request, "resolver_match", None)
        if match is not None and match.url_name == f"{self.opts.app_label}_{self.opts.model_name}_changelist":
            queryset = with_payload_head(queryset)
        return queryset

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Task | None:
        # An id no row can hold is "no such task" (the admin redirects with a
        # message), where PostgreSQL would refuse the query with an error.
        if not storable_text(object_id):
            return None
        return super().get_object(request, object_id, from_field)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Task], search_term: str
    ) -> tuple[QuerySet[Task], bool]:
        """Match the term exactly against id, key, name and correlation id.

        The key is resolved first (a primary-key lookup) so the task query is
        an OR of indexed equalities, which PostgreSQL answers with a bitmap OR
        instead of scanning for ``id IN (subquery)``.
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        if not storable_text(term):
            return queryset.none(), False
        ids = [term]
        keyed = TaskKey.objects.using(_alias()).filter(key=term).values_list("task_id", flat=True).first()
        if keyed is not None:
            ids.append(keyed)
        return queryset.filter(Q(pk__in=ids) | Q(name=term) | Q(correlation_id=term)), False

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [
            path("dashboard/", wrap(self.dashboard_view), name=f"{prefix}_dashboard"),
            path("dashboard/<slug:control>/", wrap(self.queue_control_view), name=f"{prefix}_queue_control"),
            # Before the task's own paths: "bulk/1/cancel/" is no task id.
            path("bulk/", wrap(self.bulk_confirm_view), name=f"{prefix}_bulk"),
            path("bulk/<int:pk>/", wrap(self.bulk_progress_view), name=f"{prefix}_bulk_progress"),
            path("bulk/<int:pk>/cancel/", wrap(self.bulk_cancel_view), name=f"{prefix}_bulk_cancel"),
            path("<path:object_id>/cancel/", wrap(self.cancel_view), name=f"{prefix}_cancel"),
            path("<path:object_id>/retry/", wrap(self.retry_view), name=f"{prefix}_retry"),
            *super().get_urls(),
        ]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        return dashboard(self, request)

    def queue_control_view(self, request: HttpRequest, control: str) -> HttpResponse:
        return run_control(self, request, control)

    def bulk_confirm_view(self, request: HttpRequest) -> HttpResponse:
        return bulk.confirm(self, request)

    def bulk_progress_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        return bulk.progress(self, request, pk)

    def bulk_cancel_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        return bulk.cancel(self, request, pk)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return cancel_one(self, request, object_id)

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return retry_one(self, request, object_id)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        request.GET = _without_nul(request.GET)  # type: ignore[assignment]  # immutable, as Django makes it
        name = self.admin_site.name
        context: dict[str, Any] = {"cairnq_dashboard_url": reverse(f"{name}:cairnq_task_dashboard")}
        # "Retry / cancel all matching": offered on a list filtered by the keys an operation can carry.
        query = bulk.bulk_query(request.GET)
        if query is not None:
            context["cairnq_bulk_url"] = reverse(f"{name}:cairnq_task_bulk") + "?" + query
            context["cairnq_can_bulk_retry"] = self.has_retry_permission(request)
            context["cairnq_can_bulk_cancel"] = self.has_cancel_permission(request)
        return super().changelist_view(request, {**context, **(extra_context or {})})

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        name = self.admin_site.name
        context = {
            "cairnq_dashboard_url": reverse(f"{name}:cairnq_task_dashboard"),
            "cairnq_cancel_url": reverse(f"{name}:cairnq_task_cancel", args=[object_id]),
            "cairnq_retry_url": reverse(f"{name}:cairnq_task_retry", args=[object_id]),
            "cairnq_can_cancel": self.has_cancel_permission(request),
            "cairnq_can_retry": self.has_retry_permission(request),
        }
        return super().change_view(request, object_id, form_url, {**context, **(extra_context or {})})

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Task | None = None,
    ) -> HttpResponse:
        # The row is already loaded here; flag it without another query.
        if obj is not None and has_no_handler(obj):
            context["cairnq_no_handler"] = obj.name
        if obj is not None:
            context.update(error_summary(obj.error))
        return super().render_change_form(request, context, add, change, form_url, obj)

    # ---- columns -------------------------------------------------------
    # Sorting by the task sorts by id, newest first by default, as the list is.
    @admin.display(description=_("task"), ordering="id")
    def task_cell(self, obj: Task) -> SafeString:
        return task_html(obj.name, obj.pk, obj.error)

    @admin.display(description=_("queue"), ordering="queue")
    def queue_cell(self, obj: Task) -> SafeString | str:
        return clipped(obj.queue)

    @admin.display(description=_("status"), ordering="status")
    def status_cell(self, obj: Task) -> SafeString:
        badge = status_html(obj.status, obj.cancel_requested)
        if has_no_handler(obj):
            badge = format_html("{} {}", badge, no_handler_badge(short=True))
        return format_html("{}{}", badge, attempt_html(obj.attempt, obj.max_attempts))

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, obj: Task) -> SafeString:
        badge = status_html(obj.status, obj.cancel_requested)
        if has_no_handler(obj):
            badge = format_html("{} {}", badge, no_handler_badge(short=False))
        return badge

    @admin.display(description=_("attempt"))
    def attempts(self, obj: Task) -> SafeString:
        return format_html("{} / {}", number_text(obj.attempt), number_text(obj.max_attempts))

    @admin.display(description=_("priority"), ordering="priority")
    def priority_display(self, obj: Task) -> SafeString | str:
        return number_text(obj.priority)

    @admin.display(description=_("progress"))
    def progress_bar(self, obj: Task) -> SafeString | str:
        if obj.progress is None and not obj.message:
            return EMPTY
        message = clipped(obj.message, "cairnq-progress-message", PREVIEW_CHARS) if obj.message else ""
        if obj.progress is None:
            return message
        fraction = progress_fraction(obj.progress)
        if fraction is None:
            return format_html('<span class="cairnq-progress">{}</span> {}', odd_progress(obj.progress), message)
        return format_html(
            '<span class="cairnq-progress"><progress max="1" value="{}">{}%</progress> {}%</span> {}',
            f"{fraction:.3f}",
            round(fraction * 100),
            round(fraction * 100),
            message,
        )

    # Sorting this column sorts by id: the same order, served by an index.
    @admin.display(description=_("created"), ordering="id")
    def created_display(self, obj: Task) -> Any:
        return when_text(obj.created_at_ms)

    @admin.display(description=_("payload"))
    def payload_preview(self, obj: Task) -> SafeString:
        if hasattr(obj, "payload_head"):
            text = preview_from_head(obj.payload_head, getattr(obj, "payload_bytes", None))
        else:
            text = compact_json(obj.payload)
        if text in ("", EMPTY):
            return format_html('<code class="cairnq-preview">{}</code>', EMPTY)
        return format_html(
            '<code class="cairnq-preview" title="{}">{}</code>',
            Truncator(text).chars(TITLE_CHARS),
            Truncator(text).chars(PREVIEW_CHARS),
        )

    # ---- detail page ---------------------------------------------------
    @admin.display(description=_("key"))
    def task_key(self, obj: Task) -> str:
        # cairnq_task_keys has no index on task_id (protocol 1.3); one row per
        # detail view is an acceptable scan of the key table, never of tasks.
        key = TaskKey.objects.using(_alias()).filter(task_id=obj.pk).values_list("key", flat=True).first()
        return key if key is not None else "—"

    def _task_link(self, task_id: str | None) -> SafeString | str:
        if not task_id:
            return "—"
        url = reverse(f"{self.admin_site.name}:cairnq_task_change", args=[task_id])
        return format_html('<a href="{}">{}</a>', url, task_id)

    @admin.display(description=_("parent"))
    def parent_link(self, obj: Task) -> SafeString | str:
        return self._task_link(obj.parent_id)

    @admin.display(description=_("root"))
    def root_link(self, obj: Task) -> SafeString | str:
        if obj.root_id == obj.pk:
            return format_html("{} ({})", obj.root_id, _("this task"))
        return self._task_link(obj.root_id)

    @admin.display(description=_("workflow"))
    def workflow_link(self, obj: Task) -> SafeString | str:
        return task_workflow_link(self.admin_site.name, obj)

    @admin.display(description=_("worker"))
    def worker_link(self, obj: Task) -> SafeString | str:
        # A link only where the registry has the worker: other SDKs' workers
        # do not register, and gone ones are pruned (one primary-key lookup).
        worker_id = obj.worker_id
        if worker_id is None:
            return EMPTY
        text = str(worker_id)
        if not storable_text(text) or not Worker.objects.using(_alias()).filter(pk=text).exists():
            return text
        url = reverse(f"{self.admin_site.name}:cairnq_worker_change", args=[text])
        return format_html('<a href="{}">{}</a>', url, text)

    @admin.display(description=_("lease until"))
    def lease_display(self, obj: Task) -> SafeString | str:
        return time_text(obj.lease_until_ms)

    @admin.display(description=_("timeline"))
    def timeline(self, obj: Task) -> SafeString:
        steps = [
            (_("created"), obj.created_at_ms),
            (_("due"), obj.run_at_ms),
            (_("cancel requested"), obj.cancel_requested_at_ms),
            (_("completed"), obj.completed_at_ms),
            (_("updated"), obj.updated_at_ms),
        ]
        rows = format_html_join(
            "",
            "<tr><th>{}</th><td>{}</td></tr>",
            ((label, time_text(ms)) for label, ms in steps if ms is not None),
        )
        return format_html('<table class="cairnq-timeline">{}</table>', rows)

    @admin.display(description=_("payload"))
    def payload_pretty(self, obj: Task) -> SafeString | str:
        return pretty_json(obj.payload, DETAIL_CHARS)

    @admin.display(description=_("result"))
    def result_pretty(self, obj: Task) -> SafeString | str:
        return pretty_json(obj.result, DETAIL_CHARS)

    @admin.display(description=_("error"))
    def error_pretty(self, obj: Task) -> SafeString | str:
        return pretty_json(obj.error, DETAIL_CHARS)

    @admin.display(description=_("metadata"))
    def metadata_pretty(self, obj: Task) -> SafeString | str:
        return pretty_json(obj.metadata, DETAIL_CHARS)
