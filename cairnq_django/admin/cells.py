"""How a task list cell shows a value that may be longer than its column.

The list must fit a 1,400 px window beside the admin's sidebars, so long
names, queues, ids and messages are cut by the stylesheet (``cairnq-clip``:
one line, an ellipsis) while the whole value stays in the page, in the cell's
text and in its ``title`` for a pointer's hover. Ids are cut in the middle:
ULIDs share their time prefix within a page, so the tail is what tells two
apart. An empty value reads "—".
"""

from __future__ import annotations

from typing import Any

from django.utils import formats
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext as _

from ..models import TaskStatus
from .values import EMPTY, number_text, stored_datetime, time_value

# Characters of an id always shown after the clipped head.
ID_TAIL = 6
# A title longer than this is cut: a tooltip is not a document viewer.
TITLE_CHARS = 300
# Characters of a failed task's "Type: message" line kept in the list.
ERROR_CHARS = 120


def text_of(value: Any) -> str:
    """The value as text ("" for None); bytes or a number another writer stored read as Python spells them."""
    return "" if value is None else str(value)


def clipped(value: Any, css: str = "", chars: int | None = None) -> SafeString | str:
    """One clipped line with the value as its title (both cut at ``chars`` if given), or "—"."""
    text = text_of(value)
    if not text:
        return EMPTY
    return format_html(
        '<span class="cairnq-clip{}" title="{}">{}</span>',
        f" {css}" if css else "",
        Truncator(text).chars(TITLE_CHARS),
        Truncator(text).chars(chars) if chars else text,
    )


def id_text(value: Any) -> SafeString | str:
    """A task id cut in the middle by the stylesheet: the head clips, the last characters stay."""
    text = text_of(value)
    if not text:
        return EMPTY
    head, tail = (text[:-ID_TAIL], text[-ID_TAIL:]) if len(text) > ID_TAIL * 2 else ("", text)
    return format_html(
        '<span class="cairnq-id" title="{}"><span class="cairnq-id-head">{}</span>{}</span>', text, head, tail
    )


def error_line(error: Any) -> str:
    """"Type: message" of a protocol error envelope, "" for none or another shape (its page shows it whole)."""
    if not isinstance(error, dict):
        return ""
    parts = [error.get(key) for key in ("type", "message")]
    return ": ".join(part for part in parts if isinstance(part, str) and part)


def when_text(value: Any) -> Any:
    """A millisecond time as two short lines (date, time of day), the full local time in its title.

    A value that is no time keeps ``time_value``'s marker or "—".
    """
    when = stored_datetime(value)
    if when is None:
        return time_value(value)
    return format_html(
        '<span class="cairnq-when" title="{}"><span>{}</span> <span>{}</span></span>',
        formats.localize(when),
        formats.date_format(when, "DATE_FORMAT"),
        formats.time_format(when, "TIME_FORMAT"),
    )


def task_html(name: Any, task_id: Any, error: Any) -> SafeString:
    """The task column: its name, the id under it, and for a task with an error its type and message."""
    line = error_line(error)
    shown = clipped(line, "cairnq-list-error", ERROR_CHARS) if line else ""
    return format_html("{}{}{}", clipped(name, "cairnq-name"), id_text(task_id), shown)


def status_html(status: Any, cancel_requested: bool) -> SafeString:
    """The status badge; a running task whose cancel was requested shows that instead."""
    if cancel_requested:
        return format_html('<span class="cairnq-badge cairnq-badge--cancel-requested">{}</span>', _("cancel requested"))
    label = TaskStatus(status).label if status in TaskStatus.values else text_of(status) or EMPTY
    return format_html('<span class="cairnq-badge cairnq-badge--{}">{}</span>', status, label)


def no_handler_badge(*, short: bool) -> SafeString:
    """The "no handler" badge (fault plan F18 b); the list's short one says the rest in its title."""
    if short:
        return format_html(
            '<span class="cairnq-badge cairnq-badge--no-handler" title="{}">{}</span>',
            _("no handler in this deployment: no handler for this name is registered here, "
              "so no worker of this deployment claims it."),
            _("no handler"),
        )
    return format_html(
        '<span class="cairnq-badge cairnq-badge--no-handler" title="{}">{}</span>',
        _("No handler for this name is registered here, so no worker of this deployment claims it."),
        _("no handler in this deployment"),
    )


def attempt_html(attempt: Any, max_attempts: Any) -> SafeString:
    """The attempt count, a quiet line under the list's status badge."""
    return format_html(
        '<span class="cairnq-attempt">{} {} / {}</span>', _("attempt"), number_text(attempt), number_text(max_attempts)
    )
