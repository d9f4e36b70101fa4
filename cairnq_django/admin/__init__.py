"""The task admin: importing this package registers it (Django's ``admin.autodiscover``).

``task_admin`` holds the ModelAdmin; ``filters``, ``paginator``, ``preview``,
``values``, ``actions``, ``dashboard`` and ``queue_controls`` each hold one part of its pages.
"""

from __future__ import annotations

from . import dashboard, task_admin

__all__ = ["dashboard", "task_admin"]
