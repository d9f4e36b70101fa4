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

from .values import EMPTY, stored_datetime, time_value

# Characters of an id always shown after the clipped head.
ID_TAIL = 6
# A title longer than this is cut: a tooltip is not a document viewer.
TITLE_CHARS = 300


def text_of(value: Any) -> str:
    """The value as text ("" for None); another writer may have stored bytes or a number (shown as Python spells them)."""
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
