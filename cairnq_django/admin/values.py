"""Show a stored value on an admin page whatever another writer put in the row.

The protocol's constraints let through values Python cannot turn into what
the page would show: a millisecond time past ``datetime``'s years 1-9999, a
NaN or infinite progress, text in a numeric SQLite column (SQLite is
dynamically typed), JSON Python cannot decode. Every helper here returns
something readable for such a value instead of raising, so one odd row never
answers 500 for every operator, and the page says what is odd about it.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext as _

from ..protocol.payload import Undecodable

EMPTY = "—"
# How much of an odd value's own text a marker repeats.
ODD_CHARS = 60


def _odd(text: str) -> SafeString:
    return format_html('<span class="cairnq-odd">{}</span>', text)


def _shown(value: Any) -> str:
    return Truncator(repr(value) if isinstance(value, str) else str(value)).chars(ODD_CHARS)


def stored_datetime(value: Any) -> dt.datetime | None:
    """Return the aware local datetime of a millisecond column, or None if it has none.

    None for NULL, for a value that is not an integer (text in SQLite) and for
    one outside the years ``datetime`` holds, in UTC or in the active zone.
    """
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return timezone.localtime(dt.datetime.fromtimestamp(value / 1000, tz=dt.timezone.utc))
    except (OverflowError, OSError, ValueError):
        return None


def time_value(value: Any) -> dt.datetime | SafeString | str:
    """A changelist cell: the local datetime (the admin formats it), "—" or a marker."""
    when = stored_datetime(value)
    if when is not None:
        return when
    return EMPTY if value is None else odd_time(value)


def time_text(value: Any) -> SafeString | str:
    """A detail-page time to the millisecond, "—" or a marker."""
    when = stored_datetime(value)
    if when is None:
        return EMPTY if value is None else odd_time(value)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d} {when.tzname()}"


def odd_time(value: Any) -> SafeString:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _odd(_("out of range (%(value)s ms)") % {"value": _shown(value)})
    return _odd(_("not a time: %(value)s") % {"value": _shown(value)})


def progress_fraction(value: Any) -> float | None:
    """Return the progress as a fraction in [0, 1], or None when it is none or not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return min(max(float(value), 0.0), 1.0)


def odd_progress(value: Any) -> SafeString:
    if isinstance(value, float) and not math.isfinite(value):
        return _odd(_("progress %(value)s") % {"value": _shown(value)})
    return _odd(_("progress not a number: %(value)s") % {"value": _shown(value)})


def number_text(value: Any) -> SafeString | str:
    """An integer column as text; anything else stored there is marked."""
    if value is None:
        return EMPTY
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return _odd(_("not a number: %(value)s") % {"value": _shown(value)})


def undecodable_block(value: Undecodable, limit: int) -> SafeString:
    """Show JSON Python could not decode: marked, with its raw text cut at ``limit``."""
    note = _("Undecodable JSON (%(reason)s); its stored text:") % {"reason": value.reason}
    text = value.text
    cut = ""
    if len(text) > limit:
        cut = _("Cut at %(limit)d characters of %(total)d.") % {"limit": limit, "total": len(text)}
        text = text[:limit]
    return format_html(
        '<p class="cairnq-undecodable">{}</p><pre class="cairnq-json cairnq-json--raw">{}</pre>{}',
        note,
        text,
        format_html('<p class="help">{}</p>', cut) if cut else "",
    )


def pretty_json(value: Any, limit: int) -> SafeString | str:
    """A JSON column pretty-printed and escaped, cut at ``limit`` characters."""
    if value is None:
        return EMPTY
    if isinstance(value, Undecodable):
        return undecodable_block(value, limit)
    try:
        text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    except RecursionError:
        # Decoded near the recursion limit, then re-encoded deeper in the
        # page's call stack: say so rather than fail the page.
        return _odd(_("nested too deeply to show here"))
    if len(text) > limit:
        return format_html(
            '<pre class="cairnq-json">{}</pre><p class="help">{}</p>',
            text[:limit],
            _("Cut at %(limit)d characters of %(total)d.") % {"limit": limit, "total": len(text)},
        )
    return format_html('<pre class="cairnq-json">{}</pre>', text)


def storable_text(value: str) -> bool:
    """True when ``value`` is text a row can hold on both dialects (no NUL, valid UTF-8).

    A filter, search term or object id that fails this matches no row;
    PostgreSQL would refuse the query with an error instead.
    """
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
