"""The changelist's filters: fixed lists and typed exact values, never a choice list read from the table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from .values import storable_text
from ..client.task_filter import apply_error_message, apply_error_type
from ..conf import get_config
from ..models import LIVE_STATUSES, Task, TaskStatus
from ..tasks.registry import registered

CANCEL_REQUESTED = "cancel_requested"
NO_HANDLER = "none"


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


class ErrorTypeFilter(ExactTextFilter):
    """The error envelope's ``type``, exactly (the dashboard's triage links here)."""

    title = _("error type")
    parameter_name = "error_type"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Task]) -> QuerySet[Task]:
        value = (self.value() or "").strip()
        if not value:
            return queryset
        if not storable_text(value):
            return queryset.none()
        return apply_error_type(queryset, value)


class ErrorMessageFilter(ExactTextFilter):
    """The error envelope's ``message`` starting with the typed text, case and all."""

    title = _("error message starts with")
    parameter_name = "error_message"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Task]) -> QuerySet[Task]:
        value = self.value() or ""
        if not value.strip():
            return queryset
        if not storable_text(value):
            return queryset.none()
        return apply_error_message(queryset, value)
