"""``manage.py`` whose worker flushes its per-minute history every ``FLUSH_INTERVAL_S`` seconds.

Run as ``python tests/worker/_quick_flush_worker.py cairnq_worker ARGS`` with
``FLUSH_INTERVAL_S`` set: the housekeeping thread's flush period (5 s,
``cairnq_django.worker.history.FLUSH_INTERVAL_S``) becomes that, so a test
sees a running worker's periodic flush without waiting 5 s for it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from cairnq_django.worker import housekeeping

    housekeeping.FLUSH_INTERVAL_S = float(os.environ["FLUSH_INTERVAL_S"])
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
