"""The queue dashboard's per-queue controls: Pause and Resume, each a permission-gated POST.

A control is one ``QueueControl``: its label, the permission it needs, when
it applies to a queue's card, the text fields its form sends, and a module
function that acts on the queue and says what it did. The dashboard shows a
card the controls that apply to it and that the user may use; ``run_control``
handles their POST (Django's CSRF check runs first, through ``admin_view``),
asks for the permission again, acts, records a ``LogEntry`` when something
changed, and goes back to the dashboard. Another control is one more function
and one more entry in ``CONTROLS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Model
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from ..client import pauses
from ..models import QueuePause

if TYPE_CHECKING:
    from .dashboard import QueueRow
    from .task_admin import TaskAdmin

PAUSE_PERMISSION = "cairnq.pause_queue"


@dataclass(frozen=True)
class ControlField:
    """A text input a control's form sends along with the queue."""

    name: str
    label: Promise
    max_length: int


@dataclass(frozen=True)
class Done:
    """What a control did: whether it changed anything, what to tell the user, what to log it against."""

    changed: bool
    message: str
    logged: Model | None = None


@dataclass(frozen=True)
class QueueControl:
    name: str
    label: Promise
    permission: str
    applies: Callable[[QueueRow], bool]
    act: Callable[[HttpRequest, str], Done]
    fields: tuple[ControlField, ...] = ()
    danger: bool = False


@dataclass(frozen=True)
class ShownControl:
    """A control on one card, with the URL its form posts to."""

    control: QueueControl
    url: str


def pause_queue(request: HttpRequest, queue: str) -> Done:
    """Pause the queue, recording the admin user and the reason typed."""
    reason = request.POST.get("reason", "").strip()
    by = request.user.get_username()[: pauses.MAX_BY_CHARS]
    pause, created = pauses.pause(queue, reason=reason, by=by)
    if not created:
        return Done(False, _("Queue “%(queue)s” was already paused.") % {"queue": queue})
    if reason:
        message = _("Paused queue “%(queue)s”: %(reason)s") % {"queue": queue, "reason": reason}
    else:
        message = _("Paused queue “%(queue)s”.") % {"queue": queue}
    return Done(True, message, pause)


def resume_queue(request: HttpRequest, queue: str) -> Done:
    """Resume the queue (its idle workers are woken at once on PostgreSQL)."""
    if not pauses.resume_queue(queue):
        return Done(False, _("Queue “%(queue)s” was not paused.") % {"queue": queue})
    return Done(True, _("Resumed queue “%(queue)s”.") % {"queue": queue}, QueuePause(queue=queue))


CONTROLS = (
    QueueControl(
        name="pause",
        label=gettext_lazy("Pause"),
        permission=PAUSE_PERMISSION,
        applies=lambda row: row.pause is None,
        act=pause_queue,
        fields=(ControlField("reason", gettext_lazy("Reason (optional)"), 1024),),
        danger=True,
    ),
    QueueControl(
        name="resume",
        label=gettext_lazy("Resume"),
        permission=PAUSE_PERMISSION,
        applies=lambda row: row.pause is not None,
        act=resume_queue,
    ),
)
_BY_NAME = {control.name: control for control in CONTROLS}


def control_url(model_admin: TaskAdmin, control: QueueControl) -> str:
    return reverse(f"{model_admin.admin_site.name}:cairnq_task_queue_control", args=[control.name])


def shown_controls(model_admin: TaskAdmin, request: HttpRequest, row: QueueRow) -> list[ShownControl]:
    """The controls of ``row``'s card: those that apply to it and that the user holds the permission of."""
    user = request.user
    return [
        ShownControl(control, control_url(model_admin, control))
        for control in CONTROLS
        if control.applies(row) and user.has_perm(control.permission)
    ]


def run_control(model_admin: TaskAdmin, request: HttpRequest, name: str) -> HttpResponse:
    """Handle a control's POST (needs ``view_task`` and the control's permission)."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    control = _BY_NAME.get(name)
    if control is None:
        raise Http404
    if not (model_admin.has_view_permission(request) and request.user.has_perm(control.permission)):
        raise PermissionDenied
    try:
        done = control.act(request, request.POST.get("queue", ""))
    except ValueError as exc:  # the API's rule refused the queue or a field
        messages.error(request, _("%(control)s refused: %(problem)s") % {"control": control.label, "problem": exc})
    else:
        if done.changed and done.logged is not None:
            model_admin.log_change(request, done.logged, done.message)
        messages.add_message(request, messages.SUCCESS if done.changed else messages.WARNING, done.message)
    return HttpResponseRedirect(reverse(f"{model_admin.admin_site.name}:cairnq_task_dashboard"))
