"""The worker behind ``manage.py cairnq_worker``: one concern per module.

``options`` (``WorkerOptions``), ``loop`` (``Worker.run``), ``planner`` (the
claim poll: source order, probe, sessions, budgets), ``budgets`` (call,
per-name, resource and byte budgets), ``attempt`` (the worker's state of one
attempt), ``executor`` (the thread pool and event loop that run handlers),
``outcomes`` (a handler's return or exception made settlements), ``settler``
(coalesced settlement writes), ``heartbeat`` (lease renewal), ``housekeeping`` (retention and the
unserved-names check), ``wakeups`` (LISTEN / file-change wake-ups),
``connections`` (connection care) and ``shutdown`` (two-phase signals).
Periodic schedules are ticked from the loop through
``cairnq_django.tasks.periodic.Ticker``; the rules for the worker's settings
are in ``cairnq_django.conf``.
"""

from __future__ import annotations

from .loop import Worker
from .options import WorkerOptions

__all__ = ["Worker", "WorkerOptions"]
