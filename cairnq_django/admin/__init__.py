"""The operators' view of the queue: a read-only task admin with cancel and retry.

Rows change only through the store's operations, so the admin grants no add,
change or delete permission. Everything here must stay cheap on a million rows:
no exact ``COUNT(*)`` per page view, no filter choice list built from the
table, exact-match search that the protocol's indexes can answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar, cast

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Case, F, Func, IntegerField, Q, QuerySet, TextField, Value, When
from django.db.models.functions import Cast, Substr
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.urls import URLPattern, path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from . import views as admin_views
from .preview import fill_payload_heads, reads_blobs
from .values import (
    EMPTY,
    number_text,
    odd_progress,
    pretty_json,
    progress_fraction,
    storable_text,
    time_text,
    time_value,
)
from ..conf import get_config
from ..models import LIVE_STATUSES, QueueDashboard, Task, TaskKey, TaskStatus
from ..protocol.payload import Undecodable, decode_stored
from ..tasks.registry import get_task, registered
from ..store.sql_files import statement

# Rows counted exactly before the paginator settles for "more than this".
COUNT_CAP = 10_000
PREVIEW_CHARS = 60
# The detail page shows whole documents up to this size, then cuts with a note.
DETAIL_CHARS = 100_000
# The changelist reads at most this much of a payload from the database.
PREVIEW_SOURCE_CHARS = 2048
CANCEL_REQUESTED = "cancel_requested"
NO_HANDLER = "none"


def _alias() -> str:
    return str(get_config()["DATABASE"])


class EstimatedCountPaginator(Paginator):
    """Count at most ``COUNT_CAP + 1`` rows; past that, estimate.

    An exact ``COUNT(*)`` over a million rows costs a full scan per page view.
    The capped count is ``SELECT COUNT(*) FROM (... LIMIT cap+1)``. When the
    unfiltered table is over the cap, PostgreSQL's planner statistics
    (``pg_class.reltuples``) give the size; otherwise the count reads "cap+".
    ``estimated`` tells the template to say so.
    """

    # None: the count is exact; "about": a planner estimate; "more": a lower bound.
    estimated: str | None = None

    @cached_property
    def count(self) -> int:
        queryset = cast(QuerySet[Task], self.object_list)
        capped = queryset.order_by()[: COUNT_CAP + 1].count()
        if capped <= COUNT_CAP:
            return capped
        if not queryset.query.where:
            approx = _table_estimate(queryset.db)
            if approx is not None and approx > COUNT_CAP:
                self.estimated = "about"
                return approx
        self.estimated = "more"
        return COUNT_CAP


def _table_estimate(alias: str) -> int | None:
    """Return PostgreSQL's row estimate for the task table (None elsewhere or if never analyzed)."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(statement("postgres", "table_estimate"), {"table": Task._meta.db_table})
        row = cursor.fetchone()
    if row is None or row[0] is None or row[0] < 0:
        return None
    return int(row[0])


class StatusFilter(admin.SimpleListFilter):
    """Filter by status from the fixed list of statuses, plus "cancel requested"."""

    title = _("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [*TaskStatus.choices, (CANCEL_REQUESTED, _("Cancel requested"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Task]) -> QuerySet[Task]:
        value = self.value()
        if value == CANCEL_REQUESTED:
            return queryset.filter(status=TaskStatus.RUNNING, cancel_requested_at_ms__isnull=False)
        if value in TaskStatus.values:
            return queryset.filter(status=value)
        return queryset


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


class HandlerFilter(admin.SimpleListFilter):
    """Split tasks by whether this deployment registers a handler for their name.

    "No handler" lists only queued and running tasks, the ones the flag marks:
    a finished task whose handler has since gone needs nobody. Both choices are
    ``name IN (registered names)`` or its negation, from the in-process registry.
    """

    title = _("handler")
    parameter_name = "handler"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("registered", _("Registered")), (NO_HANDLER, _("No handler in this deployment"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Task]) -> QuerySet[Task]:
        names = list(registered())
        if self.value() == "registered":
            return queryset.filter(name__in=names)
        if self.value() == NO_HANDLER:
            return queryset.filter(Q(status__in=LIVE_STATUSES) & ~Q(name__in=names))
        return queryset


class ExactTextFilter(admin.SimpleListFilter):
    """Filter on one column by an exact value typed into a box.

    A choice list would need ``SELECT DISTINCT`` over the whole table on every
    page view; a typed value becomes an equality the protocol's indexes serve.
    ``suggestions`` (from settings, never from the table) are offered as links.
    """

    template = "admin/cairnq/text_filter.html"
    field = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, value) for value in self.suggestions()]

    def suggestions(self) -> list[str]:
        return []

    def has_output(self) -> bool:
        return True

    def queryset(self, request: HttpRequest, queryset: QuerySet[Task]) -> QuerySet[Task]:
        value = (self.value() or "").strip()
        if not value:
            return queryset
        if not storable_text(value):
            return queryset.none()
        return queryset.filter(**{self.field: value})

    def choices(self, changelist: ChangeList) -> Iterator[Any]:
        # The box submits a GET form, so every other current parameter rides
        # along as a hidden input (but not the page number: a new filter starts at page 1).
        parameter = str(self.parameter_name)
        self.hidden_params = [
            (key, value)
            for key, value in changelist.params.items()
            if key != parameter and isinstance(value, str) and storable_text(key + value)
        ]
        self.current = self.value() or ""
        yield {
            "selected": self.value() is None,
            "query_string": changelist.get_query_string(remove=[parameter]),
            "display": _("All"),
        }
        for value, label in self.lookup_choices:
            yield {
                "selected": self.value() == value,
                "query_string": changelist.get_query_string({parameter: value}),
                "display": label,
            }


class QueueFilter(ExactTextFilter):
    title = _("queue")
    parameter_name = "queue"
    field = "queue"

    def suggestions(self) -> list[str]:
        return [str(queue) for queue in get_config()["QUEUES"]][:20]


class NameFilter(ExactTextFilter):
    title = _("name")
    parameter_name = "name"
    field = "name"


def _with_payload_head(queryset: QuerySet[Task]) -> QuerySet[Task]:
    """Load only the start of each payload for the changelist, never whole documents.

    A page of 50 rows holding 50 MB payloads would otherwise read, decode and
    re-encode gigabytes. SQLite reads a prefix of each row of the page through
    blob I/O once the page is fetched (``PreviewChangeList``); PostgreSQL cannot
    cut jsonb without converting all of it to text, so it returns small
    payloads whole and for larger ones only their stored size
    (``pg_column_size``, no detoast).
    """
    queryset = queryset.defer("payload")
    if reads_blobs(queryset.db):
        return queryset
    if connections[queryset.db].vendor == "postgresql":
        size = Func(F("payload"), function="pg_column_size", output_field=IntegerField())
        head = Case(
            When(payload_bytes__lte=PREVIEW_SOURCE_CHARS, then=Cast("payload", TextField())),
            default=Value(None),
            output_field=TextField(),
        )
        return queryset.annotate(payload_bytes=size).annotate(payload_head=head)
    # SQLite without blob I/O (Python 3.10): substr() loads each whole value.
    return queryset.annotate(
        payload_head=Substr(Cast("payload", TextField()), 1, PREVIEW_SOURCE_CHARS + 1)
    )


class PreviewChangeList(ChangeList):
    """A changelist that reads the SQLite payload heads of its page in one pass."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        alias = self.result_list.db
        if reads_blobs(alias):
            # Evaluates the page query; the template then iterates its cached rows.
            fill_payload_heads(alias, list(self.result_list), PREVIEW_SOURCE_CHARS + 1)


def _preview_from_head(head: str | None, stored_bytes: int | None) -> str:
    if head is None and stored_bytes is None:
        # SQLite: the row went away between the page query and the blob read.
        return EMPTY
    if head is None:
        return str(_("(large payload: %(size)s bytes stored)") % {"size": stored_bytes})
    if len(head) <= PREVIEW_SOURCE_CHARS:
        # The whole payload: normalise it, or say Python cannot decode it.
        return _compact_json(decode_stored(head))
    return head


def _compact_json(value: Any) -> str:
    if isinstance(value, Undecodable):
        return f"{_('undecodable JSON:')} {value.text}"
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except RecursionError:
        return str(_("(nested too deeply to show here)"))


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

    list_display = (
        "id",
        "name",
        "queue",
        "status_badge",
        "attempts",
        "progress_bar",
        "priority_display",
        "worker_id",
        "run_at_display",
        "created_display",
        "completed_display",
        "payload_preview",
    )
    list_display_links = ("id",)
    list_filter = (StatusFilter, HandlerFilter, QueueFilter, NameFilter)
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
    actions = ("cancel_tasks", "retry_tasks", "retry_tasks_reset_attempts")
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
        "worker_id",
        "lease_display",
        "timeline",
        "payload_pretty",
        "result_pretty",
        "error_pretty",
        "metadata_pretty",
    )
    fieldsets = (
        (None, {"fields": ("id", "name", "queue", "status_badge", "attempts", "priority_display", "progress_bar")}),
        (_("Lineage"), {"fields": ("task_key", "parent_link", "root_link", "correlation_id")}),
        (_("Lease"), {"fields": ("worker_id", "lease_display")}),
        (_("Timeline"), {"fields": ("timeline",)}),
        (_("Data"), {"fields": ("payload_pretty", "result_pretty", "error_pretty", "metadata_pretty")}),
    )

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
            queryset = _with_payload_head(queryset)
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
            path("<path:object_id>/cancel/", wrap(self.cancel_view), name=f"{prefix}_cancel"),
            path("<path:object_id>/retry/", wrap(self.retry_view), name=f"{prefix}_retry"),
            *super().get_urls(),
        ]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        return admin_views.dashboard(self, request)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return admin_views.cancel_one(self, request, object_id)

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return admin_views.retry_one(self, request, object_id)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        request.GET = _without_nul(request.GET)  # type: ignore[assignment]  # immutable, as Django makes it
        context = {"cairnq_dashboard_url": reverse(f"{self.admin_site.name}:cairnq_task_dashboard")}
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

    # ---- actions -------------------------------------------------------
    @admin.action(permissions=["cancel"], description=_("Cancel selected tasks"))
    def cancel_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        admin_views.cancel_queryset(self, request, queryset)

    @admin.action(permissions=["retry"], description=_("Retry selected tasks"))
    def retry_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        admin_views.retry_queryset(self, request, queryset, reset_attempt=False)

    @admin.action(permissions=["retry"], description=_("Retry selected tasks, resetting attempts"))
    def retry_tasks_reset_attempts(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        admin_views.retry_queryset(self, request, queryset, reset_attempt=True)

    # ---- columns -------------------------------------------------------
    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, obj: Task) -> SafeString:
        if obj.cancel_requested:
            badge = format_html(
                '<span class="cairnq-badge cairnq-badge--cancel-requested">{}</span>', _("cancel requested")
            )
        else:
            label = TaskStatus(obj.status).label if obj.status in TaskStatus.values else obj.status
            badge = format_html('<span class="cairnq-badge cairnq-badge--{}">{}</span>', obj.status, label)
        if has_no_handler(obj):
            badge = format_html(
                '{} <span class="cairnq-badge cairnq-badge--no-handler" title="{}">{}</span>',
                badge,
                _("No handler for this name is registered here, so no worker of this deployment claims it."),
                _("no handler in this deployment"),
            )
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
        message = Truncator(obj.message or "").chars(PREVIEW_CHARS)
        if obj.progress is None:
            return format_html('<span class="cairnq-progress-message">{}</span>', message)
        fraction = progress_fraction(obj.progress)
        if fraction is None:
            return format_html(
                '{} <span class="cairnq-progress-message">{}</span>', odd_progress(obj.progress), message
            )
        return format_html(
            '<span class="cairnq-progress"><progress max="1" value="{}">{}%</progress> {}%'
            ' <span class="cairnq-progress-message">{}</span></span>',
            f"{fraction:.3f}",
            round(fraction * 100),
            round(fraction * 100),
            message,
        )

    @admin.display(description=_("run at"), ordering="run_at_ms")
    def run_at_display(self, obj: Task) -> Any:
        return time_value(obj.run_at_ms)

    # Sorting this column sorts by id: the same order, served by an index.
    @admin.display(description=_("created"), ordering="id")
    def created_display(self, obj: Task) -> Any:
        return time_value(obj.created_at_ms)

    @admin.display(description=_("completed"), ordering="completed_at_ms")
    def completed_display(self, obj: Task) -> Any:
        return time_value(obj.completed_at_ms)

    @admin.display(description=_("payload"))
    def payload_preview(self, obj: Task) -> SafeString:
        if hasattr(obj, "payload_head"):
            text = _preview_from_head(obj.payload_head, getattr(obj, "payload_bytes", None))
        else:
            text = _compact_json(obj.payload)
        return format_html('<code class="cairnq-preview">{}</code>', Truncator(text).chars(PREVIEW_CHARS))

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
