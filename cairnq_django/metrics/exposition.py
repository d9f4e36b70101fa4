"""A registry's Prometheus text, rendered at most once every ``FRESH_S`` however many scrapers ask.

Rendering walks every series under the locks the worker's threads take to
count: 200 scrapers each rendering cut a worker's throughput five-fold.
Every scrape within ``FRESH_S`` of the last render gets the same bytes.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from prometheus_client import generate_latest

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

# Fresher than any scrape interval Prometheus allows in practice (1 s and up).
FRESH_S = 0.5


class CachedExposition:
    """The text of ``registry``; not thread-safe (the metrics server calls it from its one thread)."""

    def __init__(self, registry: CollectorRegistry, fresh_s: float = FRESH_S) -> None:
        self._registry = registry
        self._fresh_s = fresh_s
        self._text = b""
        self._rendered_at = -math.inf
        # How many times the text was rendered (the tests count them).
        self.renders = 0

    def text(self) -> bytes:
        if time.monotonic() - self._rendered_at >= self._fresh_s:
            self._text = generate_latest(self._registry)
            # Stamped after rendering: the next render starts FRESH_S after this one ended.
            self._rendered_at = time.monotonic()
            self.renders += 1
        return self._text
