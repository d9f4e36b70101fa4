"""Pickup latency: how long a claimed task waited once it was due (the ``task_started`` signal's ``pickup_ms``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..models import Task


def pickup_ms(task: Task) -> int | None:
    """The claim's time minus the later of ``run_at`` and creation, for a row the claim just leased.

    All three are the claimed row's own columns (every claim statement stamps
    ``updated_at_ms``), so one clock, the database's, measures the wait.
    """
    claimed, due, created = task.updated_at_ms, task.run_at_ms, task.created_at_ms
    # Exact type tests (a bool is no time), written out: this runs for every claimed task.
    if type(claimed) is not int or type(due) is not int or type(created) is not int:
        return None  # a foreign writer's odd value: no figure rather than a wrong one
    return max(0, claimed - max(due, created))
