"""``queue_metrics``: the queue gauges in Prometheus text format, for the user's ``urls.py``."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from .access import Access, check_access
from .queue_reading import read_queues, render
from .reading_cache import ReadingBusy, cached_text
from .text_format import CONTENT_TYPE


def _reading() -> str:
    return render(read_queues())


@never_cache
@require_GET
def queue_metrics(request: HttpRequest) -> HttpResponse:
    """Depth by queue and status, the earliest-due task's age and paused queues (see docs/metrics.md)."""
    access = check_access(request)
    if access is Access.MISCONFIGURED:
        return HttpResponse(
            'refused: CAIRNQ["METRICS_TOKEN"] is too weak to serve (system check cairnq.E019); see the log\n',
            status=403,
            content_type="text/plain",
        )
    if access is Access.UNAUTHENTICATED:
        response = HttpResponse("authentication required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="cairnq metrics"'
        return response
    if access is Access.FORBIDDEN:
        return HttpResponse("permission denied\n", status=403, content_type="text/plain")
    try:
        text = cached_text(_reading)
    except ReadingBusy:
        response = HttpResponse("a reading is under way; retry\n", status=503, content_type="text/plain")
        response["Retry-After"] = "1"
        return response
    return HttpResponse(text, content_type=CONTENT_TYPE)
