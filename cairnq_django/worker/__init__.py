"""The worker behind ``manage.py cairnq_worker``: one concern per module.

``options`` (``WorkerOptions``), ``loop`` (``Worker.run``), ``planner``
(the claim poll: source order, probe, sessions, budgets), ``lease`` (the heartbeat
thread), ``limits`` (call, per-name, resource and byte budgets), ``executor``
(thread pool and event loop that run handlers), ``settler`` (coalesced
settlement writes), ``wakeup`` (LISTEN / file-change wake-ups), ``shutdown``
(two-phase signals), ``backoff`` (retry delays), ``sweeper`` (the retention
sweep) and ``checks`` (system checks). Periodic schedules are ticked from the
loop through ``cairnq_django.tasks.periodic.Ticker``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Worker", "WorkerOptions"]


def __getattr__(name: str) -> Any:
    # Imported lazily: the registry imports ``worker.checks`` at import time,
    # and the loop imports the registry.
    if name == "Worker":
        from .loop import Worker

        return Worker
    if name == "WorkerOptions":
        from .options import WorkerOptions

        return WorkerOptions
    raise AttributeError(name)
