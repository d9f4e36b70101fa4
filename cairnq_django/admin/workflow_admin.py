"""The workflows list and a workflow's page: the runs table read-only, its graph drawn, cancel and retry.

Runs change only through the workflow API, so the admin grants no add,
change or delete; cancel and retry (``workflow_actions``) need the
``change_workflow_state`` permission. The list's filters are fixed lists or
typed exact values and its count is capped, as the task list's are. A run's
page reads its nodes and edges in two queries and draws them
(``workflow_svg``), each box a link to its node's task. While a run has
nodes left, its page's "N of M ended" refreshes itself: the dashboard's
script (``static/cairnq/dashboard.js``) fetches ``progress_view``, one
primary-key read, every ``REFRESH_MS``, and stops once the run has ended.
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import quote

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from .cells import clipped, id_text, when_text
from .filters import ExactTextFilter
from .paginator import EstimatedCountPaginator
from .values import EMPTY, number_text, storable_text, time_text
from .workflow_actions import cancel_one, cancel_workflows, retry_one, retry_workflows
from .workflow_svg import DrawnNode, graph_svg, state_counts, state_label
from ..conf import get_config
from ..models import Task
from ..protocol.limits import METADATA_NAMESPACE
from ..workflows.advance import WORKFLOW_KEY, is_node_task
from ..workflows.models import RunStatus, WorkflowEdge, WorkflowNode, WorkflowRun

# The kinds ``Workflow``, its compositions and ``Batch`` write (workflows/workflow.py, canvas.py, batch.py).
KINDS = ("workflow", "chain", "group", "chord", "batch")
# What reverse() leaves unquoted in a path argument (django.urls.resolvers).
URL_SAFE = "/~:@!$&'()*+,;="
# How often a running run's page fetches its "N of M ended" again (static/cairnq/dashboard.js).
REFRESH_MS = 2_000
# The header value that script checks, so it never swaps in another page (a login page after the session ended).
FRAGMENT = "workflow-progress"


class KindFilter(admin.SimpleListFilter):
    """Filter by kind from the fixed list, never a ``SELECT DISTINCT`` over the runs."""

    title = _("kind")
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(kind, kind) for kind in KINDS]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        return queryset.filter(kind=self.value()) if self.value() in KINDS else queryset


class WorkflowNameFilter(ExactTextFilter):
    title = _("name")
    parameter_name = "name"
    field = "name"


def run_status_badge(status: str) -> SafeString:
    """The run's status in the task list's badge colours (the four statuses are task statuses too)."""
    label = RunStatus(status).label if status in RunStatus.values else status
    return format_html('<span class="cairnq-badge cairnq-badge--{}">{}</span>', status, label)


def ended_text(run: WorkflowRun) -> str:
    """The run's "N of M ended", from its own counters: no node is read.

    An open batch counts its close as one more node left (docs/workflows.md,
    "Batches"), so until its block exits the figure is one behind; an open
    batch with nothing ended yet would read -1 and shows 0.
    """
    ended = max(0, run.nodes_total - run.nodes_left)
    return str(_("%(ended)d of %(total)d ended") % {"ended": ended, "total": run.nodes_total})


def run_is_live(run: WorkflowRun) -> bool:
    """Its count can still move: running, or canceled with released tasks not ended yet."""
    return run.status == RunStatus.RUNNING or run.nodes_left > 0


def progress_fragment(run: WorkflowRun, page_url: str) -> SafeString:
    """The live region's content: the count; once the run has ended, its status and the mark that stops refreshing.

    Only the count refreshes: the graph, the status field and the buttons
    are as the page was drawn, so the region says so and, at the end, links
    to the page again. The note shows only where the script runs (admin.css
    shows ``.cairnq-live-note`` inside ``.cairnq-live-on``).
    """
    if run_is_live(run):
        return format_html(
            '<span class="cairnq-wf-ended">{}</span> <span class="cairnq-live-note">{}</span>',
            ended_text(run), _("(updates every %(s)d s; reload the page for the graph)") % {"s": REFRESH_MS // 1000},
        )
    return format_html(
        '<span class="cairnq-wf-ended" data-cairnq-final>{}</span> {} <a href="{}" class="cairnq-wf-reload">{}</a>',
        ended_text(run), run_status_badge(run.status), page_url, _("Reload the page"),
    )


@admin.register(WorkflowRun)
class WorkflowRunAdmin(admin.ModelAdmin):
    """Read-only workflows list and detail, with permission-gated cancel and retry."""

    list_display = ("id_cell", "name_cell", "kind", "status_cell", "ended_cell", "created_cell", "finished_cell")
    list_display_links = ("id_cell",)
    list_filter = ("status", KindFilter, WorkflowNameFilter)
    # The search box needs a non-empty search_fields; get_search_results does the work.
    search_fields = ("id",)
    search_help_text = _("Exact workflow id or key.")
    # Run ids are "wf_" and a ULID, whose order is creation order: the primary key index serves it.
    ordering = ("-id",)
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    empty_value_display = EMPTY
    actions = [cancel_workflows, retry_workflows]
    readonly_fields = (
        "id", "name", "key", "kind", "status_cell", "ended_display", "failed_display", "created_display",
        "finished_display",
    )
    fieldsets = (
        (None, {"fields": ("id", "name", "key", "kind", "status_cell")}),
        (_("Progress"), {"fields": ("ended_display", "failed_display", "created_display", "finished_display")}),
    )

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": ("cairnq/admin.css", "cairnq/workflow.css")}

    @staticmethod
    def alias() -> str:
        return str(get_config()["DATABASE"])

    # ---- permissions: runs change only through the workflow API ---------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: WorkflowRun | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: WorkflowRun | None = None) -> bool:
        return False

    def has_change_workflow_state_permission(self, request: HttpRequest, obj: WorkflowRun | None = None) -> bool:
        user: Any = request.user
        return bool(user.has_perm(f"{self.opts.app_label}.change_workflow_state"))

    # ---- queries and pages ----------------------------------------------
    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowRun]:
        return super().get_queryset(request).using(self.alias())

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> WorkflowRun | None:
        # An id no row can hold is "no such workflow", where PostgreSQL would refuse the query.
        if not storable_text(object_id):
            return None
        return super().get_object(request, object_id, from_field)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRun], search_term: str
    ) -> tuple[QuerySet[WorkflowRun], bool]:
        """Match the whole term against the id or the key: the primary key and the key's unique index answer it.

        A term no row can hold (a NUL, which PostgreSQL refuses in a query) matches nothing.
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        if not storable_text(term):
            return queryset.none(), False
        return queryset.filter(Q(pk=term) | Q(key=term)), False

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/cancel/", wrap(self.cancel_view), name=f"{prefix}_cancel"),
            path("<path:object_id>/retry/", wrap(self.retry_view), name=f"{prefix}_retry"),
            path("<path:object_id>/progress/", wrap(self.progress_view), name=f"{prefix}_progress"),
            *super().get_urls(),
        ]

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return cancel_one(self, request, object_id)

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return retry_one(self, request, object_id)

    def progress_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """A run's live region alone, for the page's script: whoever may open the page may read it.

        The permission is checked before the lookup, so a user who may not
        see runs learns nothing of which ids exist.
        """
        if not self.has_view_permission(request):
            raise PermissionDenied
        run = self.get_object(request, object_id)
        if run is None:
            raise Http404
        response = HttpResponse(progress_fragment(run, self.page_url(run)))
        response["X-Cairnq-Fragment"] = FRAGMENT
        return response

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: WorkflowRun | None = None,
    ) -> HttpResponse:
        if obj is not None:
            name = self.admin_site.name
            may_act = self.has_change_workflow_state_permission(request)
            context.update(
                cairnq_cancel_url=reverse(f"{name}:cairnq_workflowrun_cancel", args=[obj.pk]),
                cairnq_retry_url=reverse(f"{name}:cairnq_workflowrun_retry", args=[obj.pk]),
                cairnq_can_cancel=may_act and obj.status == RunStatus.RUNNING,
                cairnq_can_retry=may_act and obj.nodes_left == 0 and obj.status != RunStatus.SUCCEEDED,
                cairnq_live=run_is_live(obj),
                **self.graph_context(obj),
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def page_url(self, run: WorkflowRun) -> str:
        return reverse(f"{self.admin_site.name}:cairnq_workflowrun_change", args=[run.pk])

    def graph_context(self, run: WorkflowRun) -> dict[str, Any]:
        """The drawn graph and its legend: two queries, whatever the run's size."""
        alias = self.alias()
        nodes = [
            DrawnNode(*row)
            for row in WorkflowNode.objects.using(alias)
            .filter(run_id=run.pk)
            .order_by("id")
            .values_list("id", "name", "state", "task_name", "task_id", "error")
        ]
        edges = WorkflowEdge.objects.using(alias).filter(run_id=run.pk).values_list("parent_id", "child_id")
        # The URL of one task, then each node's by replacing its id (quoted as reverse() would):
        # one reverse() for the page, not one a node.
        placeholder = "cairnq-task-id"
        pattern = reverse(f"{self.admin_site.name}:cairnq_task_change", args=[placeholder])

        def task_url(task_id: str) -> str:
            return pattern.replace(placeholder, quote(task_id, safe=URL_SAFE))

        legend = format_html_join(
            " ",
            '<span class="cairnq-wf-key cairnq-wf-key--{}">{} {}</span>',
            ((state, number_text(count), state_label(state)) for state, count in state_counts(nodes)),
        )
        return {
            "cairnq_graph": graph_svg(nodes, edges, task_url),
            "cairnq_graph_legend": legend,
        }

    # ---- columns ---------------------------------------------------------
    @admin.display(description=_("workflow"), ordering="id")
    def id_cell(self, obj: WorkflowRun) -> SafeString | str:
        return id_text(obj.pk)

    @admin.display(description=_("name"), ordering="name")
    def name_cell(self, obj: WorkflowRun) -> SafeString | str:
        return clipped(obj.name, "cairnq-name")

    @admin.display(description=_("status"), ordering="status")
    def status_cell(self, obj: WorkflowRun) -> SafeString:
        return run_status_badge(obj.status)

    @admin.display(description=_("ended"))
    def ended_cell(self, obj: WorkflowRun) -> str:
        return ended_text(obj)

    # Sorting by creation sorts by id: the same order, served by the primary key.
    @admin.display(description=_("created"), ordering="id")
    def created_cell(self, obj: WorkflowRun) -> Any:
        return when_text(obj.created_at_ms)

    @admin.display(description=_("finished"))
    def finished_cell(self, obj: WorkflowRun) -> Any:
        return when_text(obj.finished_at_ms)

    # ---- detail page -----------------------------------------------------
    @admin.display(description=_("ended"))
    def ended_display(self, obj: WorkflowRun) -> SafeString | str:
        """The count; while it can still move, inside the region the script refreshes (``#cairnq-live``)."""
        if not run_is_live(obj):
            return ended_text(obj)
        return format_html(
            '<span id="cairnq-live" data-cairnq-refresh-ms="{}" data-cairnq-fragment-url="{}" '
            'data-cairnq-fragment="{}">{}</span>',
            REFRESH_MS, reverse(f"{self.admin_site.name}:cairnq_workflowrun_progress", args=[obj.pk]), FRAGMENT,
            progress_fragment(obj, self.page_url(obj)),
        )

    @admin.display(description=_("nodes failed"))
    def failed_display(self, obj: WorkflowRun) -> SafeString | str:
        return number_text(obj.nodes_failed)

    @admin.display(description=_("created"))
    def created_display(self, obj: WorkflowRun) -> SafeString | str:
        return time_text(obj.created_at_ms)

    @admin.display(description=_("finished"))
    def finished_display(self, obj: WorkflowRun) -> SafeString | str:
        return time_text(obj.finished_at_ms)


def task_workflow_link(site_name: str, task: Task) -> SafeString | str:
    """A link from a node's task to its workflow's page; "—" for a task of no workflow.

    The task's own metadata names the run (``advance.node_marker``), so a
    task of no workflow costs no query; one primary-key lookup tells a run
    still stored from one purged, which is named without a link.
    """
    if not is_node_task(task.metadata):
        return EMPTY
    marker = task.metadata[METADATA_NAMESPACE]
    run_id = marker[WORKFLOW_KEY]
    if not isinstance(run_id, str) or not storable_text(run_id):
        return EMPTY
    run = WorkflowRun.objects.using(WorkflowRunAdmin.alias()).filter(pk=run_id).values_list("name").first()
    if run is None:
        return format_html("{} ({})", run_id, _("no longer stored"))
    url = reverse(f"{site_name}:cairnq_workflowrun_change", args=[run_id])
    node = marker.get("node")
    return format_html(
        '<a href="{}" id="cairnq-workflow-link">{}</a> ({}{})', url, run[0], run_id,
        format_html(", {} {}", _("node"), node) if isinstance(node, str) else "",
    )
