"""At most one queue reading per second, however many scrapers ask (Django's cache framework).

The rendered text is cached for a second. A scraper that finds it missing
takes a lock with ``cache.add`` (atomic on every backend) and reads; the
others wait for its text instead of querying too. With a cache shared by
the web processes (Redis, Memcached, the database cache) that holds for the
whole deployment; with the default per-process memory cache, per process.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.core.cache import DEFAULT_CACHE_ALIAS, caches

KEY = "cairnq:metrics:queues"
LOCK_KEY = KEY + ":lock"
# A second reading never starts within this long of the last one's end.
FRESH_S = 1
# Kept longer, served if the reader holding the lock takes too long.
STALE_KEY = KEY + ":stale"
STALE_S = 60
# A reader that died holding the lock stops others for this long at most.
LOCK_S = 10
WAIT_S = 5.0
WAIT_STEP_S = 0.01


class ReadingBusy(Exception):
    """Another scraper's reading is under way and no earlier text is left to serve."""


def cached_text(build: Callable[[], str], *, alias: str = DEFAULT_CACHE_ALIAS, wait_s: float = WAIT_S) -> str:
    """The text ``build`` rendered less than a second ago, or a fresh one (built by one caller at a time).

    A caller that finds another's reading under way waits up to ``wait_s``
    for its text, then serves the last one kept, or raises ``ReadingBusy``.
    """
    cache = caches[alias]
    text = cache.get(KEY)
    if text is not None:
        return str(text)
    deadline = time.monotonic() + wait_s
    while True:
        if cache.add(LOCK_KEY, 1, LOCK_S):
            try:
                # Someone may have finished between our miss and our lock.
                text = cache.get(KEY)
                if text is None:
                    text = build()
                    cache.set(KEY, text, FRESH_S)
                    cache.set(STALE_KEY, text, STALE_S)
                return str(text)
            finally:
                cache.delete(LOCK_KEY)
        time.sleep(WAIT_STEP_S)
        text = cache.get(KEY)
        if text is not None:
            return str(text)
        if time.monotonic() >= deadline:
            stale = cache.get(STALE_KEY)
            if stale is not None:
                return str(stale)
            raise ReadingBusy
