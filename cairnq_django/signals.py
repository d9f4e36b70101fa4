"""Signals sent by the store and the worker, and the receivers that log them.

Receivers get plain keyword arguments so metrics code needs no imports from
cairnq_django internals.
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal, receiver

logger = logging.getLogger("cairnq_django.worker")

# sender=Task model; task=Task instance.
task_enqueued = Signal()
# sender=Task model; task_id, name, queue, attempt, worker_id.
task_started = Signal()
# sender=Task model; task_id, name, queue, attempt, worker_id, status, duration_ms.
task_finished = Signal()
# sender=Task model; task_id, name, attempt, worker_id.
task_lease_lost = Signal()


@receiver(task_lease_lost)
def _log_lease_lost(*, task_id: str, name: str, attempt: int, worker_id: str, **kwargs: Any) -> None:
    logger.warning("lease lost: task=%s name=%s attempt=%s worker=%s", task_id, name, attempt, worker_id)
