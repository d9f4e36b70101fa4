"""The worker's row in the registry (``cairnq_django_worker``): what it says about this process.

``Presence`` holds what never changes while the process runs (host, pid,
queues, names, capacities, version) and reads the counters that do from the
worker each time the heartbeat asks; the heartbeat writes the row with its
lease renewal, so registering costs no write of its own after start-up.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache
from importlib import metadata

from django.db import Error as DatabaseError

from ..store.base import Store, WorkerRecord

logger = logging.getLogger("cairnq_django.worker")

# The window the reported rate covers: the counters as of the beats of about
# the last minute (one beat older than that is kept as its start).
RATE_WINDOW_S = 60.0


@lru_cache(maxsize=1)
def package_version() -> str:
    """Return the installed cairnq-django version, or "" when run from a bare checkout."""
    try:
        return metadata.version("cairnq-django")
    except metadata.PackageNotFoundError:
        return ""


class Presence:
    """Build this worker's registry record; mark it stopped at a clean stop."""

    def __init__(
        self,
        worker_id: str,
        *,
        queues: Sequence[str],
        names: Sequence[str],
        concurrency: int,
        resources: dict[str, int],
        global_resources: dict[str, int],
        heartbeat_interval_ms: int,
        counters: Callable[[], tuple[int, int, int]],
    ) -> None:
        self.fixed = WorkerRecord(
            worker_id=worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=list(queues),
            names=list(names),
            concurrency=concurrency,
            resources=dict(resources),
            global_resources=dict(global_resources),
            version=package_version(),
            heartbeat_interval_ms=heartbeat_interval_ms,
        )
        # (in flight, succeeded, failed), read at each beat.
        self.counters = counters
        # (monotonic time, attempts ended) at each beat within the window.
        self._samples: deque[tuple[float, int]] = deque()

    def record(self) -> WorkerRecord:
        """Return the row as of now; each call is a beat's sample for the rate."""
        in_flight, succeeded, failed = self.counters()
        return replace(
            self.fixed,
            in_flight=in_flight,
            succeeded=succeeded,
            failed=failed,
            per_minute=self._rate(time.monotonic(), succeeded + failed),
        )

    def _rate(self, now: float, ended: int) -> float:
        """Attempts ended per minute since the oldest sample of the window (0 at the first)."""
        samples = self._samples
        samples.append((now, ended))
        while len(samples) > 1 and samples[1][0] <= now - RATE_WINDOW_S:
            samples.popleft()
        since, before = samples[0]
        return 0.0 if now <= since else round((ended - before) * 60 / (now - since), 2)

    def stop(self, store: Store) -> None:
        """Stamp the row stopped; a failure is logged (the row then turns lost, then is pruned)."""
        try:
            store.stop_worker(self.record())
        except DatabaseError as exc:
            logger.warning("could not mark worker %s stopped in the registry: %s", self.fixed.worker_id, exc)
