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
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache
from importlib import metadata

from django.db import Error as DatabaseError

from ..store.base import Store, WorkerRecord

logger = logging.getLogger("cairnq_django.worker")


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

    def record(self) -> WorkerRecord:
        in_flight, succeeded, failed = self.counters()
        return replace(self.fixed, in_flight=in_flight, succeeded=succeeded, failed=failed)

    def stop(self, store: Store) -> None:
        """Stamp the row stopped; a failure is logged (the row then turns lost, then is pruned)."""
        try:
            store.stop_worker(self.record())
        except DatabaseError as exc:
            logger.warning("could not mark worker %s stopped in the registry: %s", self.fixed.worker_id, exc)
