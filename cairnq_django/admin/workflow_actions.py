"""Cancel and retry workflows from the admin: the list's actions and the detail page's buttons.

Both call the Python API (``cancel_workflow``, ``retry_workflow``), one run
at a time: each is its own transaction over that run's nodes. Both need
``change_workflow_state``; each run changed gets one entry in the admin log
(its History page and *Recent actions*), as a task's cancel and retry do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from .values import storable_text
from ..workflows.graph import WorkflowError
from ..workflows.models import RunStatus, WorkflowRun
from ..workflows.run import WorkflowNotFound, cancel_workflow, retry_workflow

if TYPE_CHECKING:
    from .workflow_admin import WorkflowRunAdmin


@dataclass
class WorkflowOutcome:
    """Runs changed, the nodes that touched, and runs left alone."""

    changed: int = 0
    nodes: int = 0
    skipped: int = 0


@admin.action(permissions=["change_workflow_state"], description=gettext_lazy("Cancel selected workflows"))
def cancel_workflows(
    model_admin: WorkflowRunAdmin, request: HttpRequest, queryset: QuerySet[WorkflowRun]
) -> None:
    _change_and_report(model_admin, request, queryset.order_by("pk"), cancel_runs, cancel_message)


@admin.action(permissions=["change_workflow_state"], description=gettext_lazy("Retry selected workflows"))
def retry_workflows(
    model_admin: WorkflowRunAdmin, request: HttpRequest, queryset: QuerySet[WorkflowRun]
) -> None:
    _change_and_report(model_admin, request, queryset.order_by("pk"), retry_runs, retry_message)


def cancel_runs(model_admin: WorkflowRunAdmin, request: HttpRequest, runs: Iterable[WorkflowRun]) -> WorkflowOutcome:
    """Cancel each running run; a finished (or already canceled) one is skipped."""
    outcome = WorkflowOutcome()
    for run in runs:
        if run.status != RunStatus.RUNNING:
            outcome.skipped += 1
            continue
        try:
            touched = cancel_workflow(run.pk)
        except WorkflowNotFound:  # purged since the page was drawn
            outcome.skipped += 1
            continue
        outcome.changed += 1
        outcome.nodes += touched
        model_admin.log_change(request, run, _("Canceled the workflow (%(count)d nodes).") % {"count": touched})
    return outcome


def retry_runs(model_admin: WorkflowRunAdmin, request: HttpRequest, runs: Iterable[WorkflowRun]) -> WorkflowOutcome:
    """Run each ended run's failed, canceled and skipped nodes again; one still going or all succeeded is skipped."""
    outcome = WorkflowOutcome()
    for run in runs:
        try:
            again = retry_workflow(run.pk)
        except (WorkflowError, WorkflowNotFound):  # still running, or purged since the page was drawn
            again = 0
        if not again:
            outcome.skipped += 1
            continue
        outcome.changed += 1
        outcome.nodes += again
        model_admin.log_change(request, run, _("Retried the workflow (%(count)d nodes).") % {"count": again})
    return outcome


def cancel_message(outcome: WorkflowOutcome) -> str:
    """E.g. "2 workflows canceled (5 nodes), 1 skipped: not running"."""
    text = ngettext(
        "%(count)d workflow canceled (%(nodes)d nodes)",
        "%(count)d workflows canceled (%(nodes)d nodes)",
        outcome.changed,
    ) % {"count": outcome.changed, "nodes": outcome.nodes}
    if outcome.skipped:
        text += ", " + _("%(count)d skipped: not running") % {"count": outcome.skipped}
    return text


def retry_message(outcome: WorkflowOutcome) -> str:
    """E.g. "1 workflow retried (2 nodes), 1 skipped: still running or nothing failed"."""
    text = ngettext(
        "%(count)d workflow retried (%(nodes)d nodes)",
        "%(count)d workflows retried (%(nodes)d nodes)",
        outcome.changed,
    ) % {"count": outcome.changed, "nodes": outcome.nodes}
    if outcome.skipped:
        text += ", " + _("%(count)d skipped: still running or nothing failed") % {"count": outcome.skipped}
    return text


# cancel_runs or retry_runs, and the message that tells its outcome.
ChangeRuns = Callable[["WorkflowRunAdmin", HttpRequest, Iterable[WorkflowRun]], WorkflowOutcome]
Describe = Callable[[WorkflowOutcome], str]


def _change_and_report(
    model_admin: WorkflowRunAdmin, request: HttpRequest, runs: Iterable[WorkflowRun], change: ChangeRuns,
    describe: Describe,
) -> None:
    """Change ``runs`` and say what happened: a success message if one changed, else a warning."""
    outcome = change(model_admin, request, runs)
    level = messages.SUCCESS if outcome.changed else messages.WARNING
    messages.add_message(request, level, describe(outcome))


def _button_run(model_admin: WorkflowRunAdmin, request: HttpRequest, object_id: str) -> WorkflowRun:
    """The run a detail page's button acts on, for a user who may see it and change its state.

    The button's URL is reachable without the page, so it checks what the
    list's action would: the view permission and ``change_workflow_state``.
    """
    if not (model_admin.has_view_permission(request) and model_admin.has_change_workflow_state_permission(request)):
        raise PermissionDenied
    run = None
    if storable_text(object_id):
        run = WorkflowRun.objects.using(model_admin.alias()).filter(pk=object_id).first()
    if run is None:
        raise Http404
    return run


def _back_to_run(model_admin: WorkflowRunAdmin, object_id: str) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse(f"{model_admin.admin_site.name}:cairnq_workflowrun_change", args=[object_id]))


def _button(
    model_admin: WorkflowRunAdmin, request: HttpRequest, object_id: str, change: ChangeRuns, describe: Describe
) -> HttpResponse:
    """A detail page's button (POST only): change its one run, say what happened, go back to the run's page."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    _change_and_report(model_admin, request, [_button_run(model_admin, request, object_id)], change, describe)
    return _back_to_run(model_admin, object_id)


def cancel_one(model_admin: WorkflowRunAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """The detail page's Cancel button."""
    return _button(model_admin, request, object_id, cancel_runs, cancel_message)


def retry_one(model_admin: WorkflowRunAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """The detail page's Retry button."""
    return _button(model_admin, request, object_id, retry_runs, retry_message)
