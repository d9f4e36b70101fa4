"""The dashboard's throughput chart, drawn on the server as inline SVG.

No script, no CDN: the page carries the chart as markup, so it shows with
JavaScript off and refreshes with the rest of the card. Colours come from
classes the app's stylesheet sets for the light and the dark theme; the axis
uses ``currentColor``. Each minute's bars carry a ``<title>`` a pointer shows.
"""

from __future__ import annotations

from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from ..models import MINUTE_MS, ms_to_datetime
from .throughput import HISTORY_MINUTES, QueueHour

WIDTH = 240
HEIGHT = 60
BAR_GAP = 0.8


def _minute_label(minute_ms: int) -> str:
    moment = ms_to_datetime(minute_ms)
    return "" if moment is None else timezone.localtime(moment).strftime("%H:%M")


def throughput_svg(hour: QueueHour) -> SafeString:
    """One bar per minute of the last hour: succeeded from the baseline, failed stacked on top."""
    peak = max([ok + bad for ok, bad in zip(hour.succeeded, hour.failed)] + [1])
    slot = WIDTH / HISTORY_MINUTES
    scale = (HEIGHT - 2) / peak
    label = _("Tasks per minute over the last hour: %(ok)d succeeded, %(bad)d failed") % {
        "ok": hour.total_succeeded,
        "bad": hour.total_failed,
    }
    parts = [
        f'<svg class="cairnq-chart" viewBox="0 0 {WIDTH} {HEIGHT}" preserveAspectRatio="none" '
        f'role="img" aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for index, (ok, bad) in enumerate(zip(hour.succeeded, hour.failed)):
        if not ok and not bad:
            continue
        x = index * slot
        title = _("%(minute)s: %(ok)d succeeded, %(bad)d failed") % {
            "minute": _minute_label(hour.start_ms + index * MINUTE_MS),
            "ok": ok,
            "bad": bad,
        }
        ok_h = ok * scale
        bad_h = bad * scale
        parts.append(f"<g><title>{escape(title)}</title>")
        if ok:
            parts.append(
                f'<rect class="cairnq-chart-ok" x="{x:.2f}" y="{HEIGHT - ok_h:.2f}" '
                f'width="{slot - BAR_GAP:.2f}" height="{ok_h:.2f}"/>'
            )
        if bad:
            parts.append(
                f'<rect class="cairnq-chart-failed" x="{x:.2f}" y="{HEIGHT - ok_h - bad_h:.2f}" '
                f'width="{slot - BAR_GAP:.2f}" height="{bad_h:.2f}"/>'
            )
        parts.append("</g>")
    parts.append(
        f'<line class="cairnq-chart-axis" x1="0" y1="{HEIGHT - 0.5}" x2="{WIDTH}" y2="{HEIGHT - 0.5}"/>'
    )
    parts.append("</svg>")
    # Every value above is a number or passed through escape().
    return mark_safe("".join(parts))  # noqa: S308


def peak_per_minute(hour: QueueHour) -> int:
    return max(ok + bad for ok, bad in zip(hour.succeeded, hour.failed))
