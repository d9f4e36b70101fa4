"""Django 6.1's task framework (``django.tasks``) with the django-tasks-db backend.

Schema: ``migrate``. Client: ``noop.enqueue(payload)`` (one ORM insert per
task); the framework has no bulk enqueue, so the bulk cell stays empty and
preloading wraps the same calls in one transaction. Worker: its
``db_worker`` command (one task at a time, a 1 s idle poll by default) on the
settings in ``bench/djtasks_project``.

Run as ``python djtasks.py client --dialect D --db DB``; the harness starts the
worker as ``django-admin db_worker`` with ``bench`` and ``bench/peers`` on
``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import _wire


def client(dialect: str, db: str) -> None:
    os.environ["BENCH_DIALECT"] = dialect
    os.environ["BENCH_DB"] = db
    os.environ["DJANGO_SETTINGS_MODULE"] = "djtasks_project.settings"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction
    from djtasks_project.tasks import noop

    def setup() -> None:
        call_command("migrate", verbosity=0)

    def reset() -> None:
        from django_tasks_db.models import DBTaskResult

        DBTaskResult.objects.all().delete()

    def enqueue_one(n: int) -> dict[str, float]:
        start = _wire.now()
        for i in range(n):
            noop.enqueue({"i": i})
        return _wire.rate(n, _wire.now() - start)

    def preload(n: int, name: str, payload_bytes: int = 0) -> None:
        with transaction.atomic():
            for i in range(n):
                noop.enqueue({"i": i})

    def submit(t: int, name: str = "") -> dict[str, Any]:
        noop.enqueue({"t": t})
        return {"t_after": _wire.now()}

    _wire.serve({"setup": setup, "reset": reset, "enqueue_one": enqueue_one, "preload": preload, "submit": submit})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["client"])
    parser.add_argument("--dialect", required=True, choices=["postgres", "sqlite"])
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    client(args.dialect, args.db)


if __name__ == "__main__":
    main()
