"""The task, worker and workflow admins: importing this package registers them (Django's ``admin.autodiscover``).

``task_admin``, ``worker_admin`` and ``workflow_admin`` hold the ModelAdmins; ``filters``, ``paginator``, ``preview``,
``values``, ``actions``, ``dashboard`` and ``queue_controls`` each hold one part of its pages.
"""

from __future__ import annotations

from . import dashboard, task_admin, worker_admin, workflow_admin

__all__ = ["dashboard", "task_admin", "worker_admin", "workflow_admin"]
