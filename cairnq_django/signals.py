"""Signals sent by the client and the worker, the rule for when an enqueue is told, and the receivers that log them.

Receivers get plain keyword arguments so metrics code needs no imports from
cairnq_django internals.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import connections, transaction
from django.dispatch import Signal, receiver

logger = logging.getLogger("cairnq_django.worker")

# sender=Task model; task=Task instance.
task_enqueued = Signal()
# sender=Task model; task_id, name, queue, attempt, worker_id, pickup_ms.
# pickup_ms: the claim's time minus the later of the row's run_at and creation,
# both read from the claimed row (database clock); None for an odd stored value.
task_started = Signal()
# sender=Task model; task_id, name, queue, attempt, worker_id, status, duration_ms.
task_finished = Signal()
# sender=Task model; task_id, name, queue, attempt, worker_id, delay_ms, duration_ms.
# Sent instead of task_finished when a handler's Snooze put the task back: the
# attempt did not end (it does not count), so every task_started is followed by
# one of task_finished, task_snoozed or task_lease_lost.
task_snoozed = Signal()
# sender=Task model; task_id, name, queue, attempt, worker_id.
task_lease_lost = Signal()
# sender=Task model; worker_id, rows, duration_s. One claim statement (one
# draw) of a worker's poll, timed around its execution.
claim_drawn = Signal()


def send_after_commit(alias: str, send: Callable[[], None]) -> None:
    """Call ``send`` once the rows it tells of are committed on ``alias``.

    An enqueue signal tells a receiver a task *exists*: it may count it, log
    it or poke a worker, all wrong for a row a rollback erases. So inside an
    atomic block ``send`` waits for the outermost commit (and is dropped on
    rollback); outside one the rows are already committed and it runs now.
    Both cairnq's ``task_enqueued`` and the ``django.tasks`` one are sent so.
    """
    if connections[alias].in_atomic_block:
        # robust: a failing receiver is logged by Django instead of skipping the
        # caller's other on_commit callbacks after its data is already committed.
        transaction.on_commit(send, using=alias, robust=True)
    else:
        send()


@receiver(task_lease_lost)
def _log_lease_lost(*, task_id: str, name: str, attempt: int, worker_id: str, **kwargs: Any) -> None:
    logger.warning("lease lost: task=%s name=%s attempt=%s worker=%s", task_id, name, attempt, worker_id)
