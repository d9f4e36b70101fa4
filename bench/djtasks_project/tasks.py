"""The no-op task the django-tasks-db peer runs; it reports its start to the harness."""

from __future__ import annotations

from typing import Any

import _wire
from django.tasks import task

_count = 0


@task()
def noop(payload: dict[str, Any]) -> None:
    global _count
    _count += 1
    _wire.started(payload, _count)
